"""The stage's choice of sets and scorer, from the composed Hydra config."""

import pytest

from asr.config import load_config
from asr.decode.output import evaluation_sets
from asr.score.stage import decode_dir, scorer
from asr.utils.errors import InputError


def test_sets_default_to_the_eval_set():
    assert evaluation_sets(load_config()) == ["eval2000"]
    assert evaluation_sets(load_config(["decode.sets=[train_dev,eval2000]"])) == ["train_dev", "eval2000"]


def test_decode_dir_is_in_the_experiment():
    cfg = load_config(["exp_name=blstm"])
    assert str(decode_dir(cfg, "eval2000")) == "exp/blstm/decode_eval2000"


def test_unknown_scorer_is_an_input_error():
    with pytest.raises(InputError, match="score.kind='sclite' is not a known scorer"):
        scorer("sclite")
