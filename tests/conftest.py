"""Fixtures every test package may use. The corpora themselves are in tests/fixtures/."""

import pytest

from tests.fixtures.toy_corpus import make_toy_experiment

pytest_plugins = ["tests.cpu_report"]


@pytest.fixture(scope="session")
def toy_corpus(tmp_path_factory):
    """The toy corpus with its tokenizer, made once per session; tests that write into it copy it."""
    root = tmp_path_factory.mktemp("toy")
    make_toy_experiment(root)
    return root
