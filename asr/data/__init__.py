"""Data: Kaldi data dirs, audio I/O, corpus preparers, text normalisation, synthetic corpus."""
