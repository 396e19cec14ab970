"""The toy corpus for benchmark tests that train."""

import pytest

from tests.train.toy_corpus import make_toy_experiment


@pytest.fixture(scope="session")
def toy_corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench_toy")
    make_toy_experiment(root)
    return root
