"""Features: Kaldi-compatible filterbanks, CMVN, fMLLR, and the extraction driver."""
