"""`python -m asr.gmm.decode`: the GMM systems' decoding stage (the library: asr/gmm/decoding.py)."""
