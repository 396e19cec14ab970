"""Batch-size sweep: SSGD vs ADPSGD held-out loss against the global batch (the paper's
Figure 1), with simulated learners: `python -m asr.sweep`."""
