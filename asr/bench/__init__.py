"""Benchmarks: `python -m asr.bench <name> [options]`, each writing its results as JSON."""
