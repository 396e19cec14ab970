"""decode=wfst's set-up errors: one clear line from the decoding process, never a pool that
restarts a failing worker forever."""

import pytest

from asr.config import load_config
from asr.decode.wfst import ParallelWfstSearch, WfstSpec
from asr.lang.search import SearchOptions
from asr.utils.errors import InputError


def test_a_wfst_decode_without_a_graph_names_the_options():
    with pytest.raises(InputError, match="decode.graph and decode.hmm_model"):
        WfstSpec.of(load_config(["decode=wfst"]))


def test_a_missing_model_is_an_error_of_the_parent_not_of_its_workers(tmp_path):
    spec = WfstSpec(str(tmp_path / "graph"), str(tmp_path / "final.mdl"), str(tmp_path / "lang"), SearchOptions())
    with pytest.raises(InputError, match="final.mdl"):
        ParallelWfstSearch(spec, jobs=2)
