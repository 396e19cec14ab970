"""Features: Kaldi-compatible filterbanks, deltas, splicing, CMVN, a GMM system (LDA+MLLT,
fMLLR), Kaldi file interop and the extraction driver; asr.features.recipes composes them."""
