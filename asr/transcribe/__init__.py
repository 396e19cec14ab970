"""Audio files in, words out, with a trained experiment (`python -m asr.transcribe`,
asr/transcribe/transcribe.py). Nothing is imported here, so --help needs no torch."""
