"""Acoustic models: the BLSTM encoder with pluggable output heads."""
