"""Kaldi HMM models through kaldi-hmm-gmm: context-dependency trees (statistics, questions,
building, Kaldi's `tree` file) and what the GMM-HMM system needs around them."""
