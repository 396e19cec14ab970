"""Fixtures every test package may use. The corpora themselves are in tests/fixtures/."""

import pytest

from tests.fixtures.ssgd_reference import train_ssgd_reference
from tests.fixtures.toy_corpus import make_toy_experiment

pytest_plugins = ["tests.cpu_report"]


@pytest.fixture(scope="session")
def toy_corpus(tmp_path_factory):
    """The toy corpus with its tokenizer, made once per session; tests that write into it copy it."""
    root = tmp_path_factory.mktemp("toy")
    make_toy_experiment(root)
    return root


@pytest.fixture(scope="session")
def ssgd_reference(toy_corpus, tmp_path_factory):
    """The exp dir of the uninterrupted SSGD run (tests/fixtures/ssgd_reference.py), trained once
    per session for the tests that compare an interrupted run with it; read it, never write."""
    return train_ssgd_reference(toy_corpus, tmp_path_factory.mktemp("ssgd_reference") / "exp")
