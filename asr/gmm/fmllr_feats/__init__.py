"""`python -m asr.gmm.fmllr_feats`: a SAT system's speaker-adapted features (asr/gmm/adapted_features.py)."""
