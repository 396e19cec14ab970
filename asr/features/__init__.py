"""Features: Kaldi-compatible filterbanks, deltas, splicing, CMVN, a GMM system (LDA+MLLT,
fMLLR), the import of Kaldi feature sets and the extraction driver; asr.features.recipes composes them."""
