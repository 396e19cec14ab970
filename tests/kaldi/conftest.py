"""The Kaldi topology and monophone model of tests/hmm, for the final.mdl and transition model tests."""

from tests.hmm.conftest import mono_model, topology  # noqa: F401  (fixtures, found by name)
