"""`python -m asr.sweep.diagnose`: targeted runs that change one candidate cause of ADPSGD's lag
behind SSGD at a time (the library: asr/sweep/diagnose/diagnostics.py)."""
