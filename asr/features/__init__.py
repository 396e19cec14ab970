"""Features, one subpackage per recipe (logmel/, fmllr/, ivector/; kaldi_import for Kaldi's own)
over shared parts: CMVN, deltas, splicing, the diagonal GMM and LDA+MLLT, the feature set
reader and writer, the worker pool and the joining of parts. asr.features.recipes picks one."""
