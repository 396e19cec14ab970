"""LM weight and word score tuned on the dev set (`python -m asr.tune`, asr/tune/grid.py).

Nothing is imported here: `python -m asr.tune --help` imports this package, and must answer
without importing torch."""
