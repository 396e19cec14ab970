"""Kaldi's file formats, one home for each, below every stage that reads or writes them.
Imports nothing of asr but `asr.utils`."""
