"""The config snapshot guard: a changed value is refused unless forced; an option the toolkit
gained or dropped since the snapshot is a warning (the earlier run could not have set it)."""

import logging

import pytest
from omegaconf import OmegaConf

from asr.train.experiment import SNAPSHOT_NAME, check_config
from asr.utils.errors import InputError


def snapshot(exp_dir, **groups):
    (exp_dir / SNAPSHOT_NAME).write_text(OmegaConf.to_yaml(OmegaConf.create(groups)))


def current(**groups):
    return OmegaConf.create(groups)


def test_a_changed_value_is_refused_and_forcing_lists_it(tmp_path):
    snapshot(tmp_path, model={"hidden_size": 32})
    with pytest.raises(InputError, match=r"model.hidden_size: 32 -> 64\nUse a new exp_name, or pass train.force=true"):
        check_config(tmp_path, current(model={"hidden_size": 64}))
    assert check_config(tmp_path, current(model={"hidden_size": 64}), force=True) == ["model.hidden_size: 32 -> 64"]


def test_options_added_or_dropped_by_the_toolkit_are_a_warning(tmp_path, caplog):
    snapshot(tmp_path, model={"hidden_size": 32}, features={"fmllr": {"passes": 10}})
    now = current(model={"hidden_size": 32}, features={"ivector": {"dim": 100}}, data={"max_unreadable": 0.05})
    with caplog.at_level(logging.WARNING):
        assert check_config(tmp_path, now) == []
    assert "options added or removed by the toolkit since this experiment started" in caplog.text
    for line in (
        "data.max_unreadable: '(absent)' -> 0.05",
        "features.fmllr.passes: 10 -> '(absent)'",
        "features.ivector.dim: '(absent)' -> 100",
    ):
        assert line in caplog.text


def test_ignored_keys_and_no_snapshot(tmp_path):
    assert check_config(tmp_path, current(model={"hidden_size": 1})) == []  # nothing trained yet
    snapshot(tmp_path, data={"swbd_dir": "/a"}, features={"jobs": 2})
    assert check_config(tmp_path, current(data={"swbd_dir": "/b"}, features={"jobs": 8})) == []  # where, not what
