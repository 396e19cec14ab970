"""HMMs for GMM and hybrid systems: Kaldi's model files for kaldi_hmm_gmm objects, decision trees."""
