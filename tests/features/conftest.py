"""Fixtures the feature tests share."""

import pytest

from tests.features.test_features_extract import make_data_dir

SETS = ("train", "dev", "eval")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A small SPHERE corpus with a data dir for each of SETS; one per test module."""
    root = tmp_path_factory.mktemp("corpus")
    for name in SETS:
        make_data_dir(root, name)
    return root
