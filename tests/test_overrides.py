"""The recipe's up-front check of its overrides: one line per mistake, the closest keys named."""

from __future__ import annotations

import pytest

from asr.overrides import group_choices, main, override_problem


@pytest.mark.parametrize(
    "override,problem",
    [
        ("train.epoch=2", "train.epoch: unknown key; did you mean train.epochs?"),
        ("+train.epochz=1", "train.epochz: unknown key; did you mean train.epochs?"),
        ("features.fmlr.dim=3", "features.fmlr.dim: unknown key; did you mean features.fmllr?"),
        ("trian.epochs=2", "trian.epochs: unknown key; did you mean train?"),
        ("distributed=foo", "distributed=foo: no such choice; choose one of adpsgd, hadpsgd, none, ssgd"),
        ("epochs", "epochs: not an override (key=value)"),
    ],
)
def test_a_mistake_is_one_line_naming_the_key_and_the_closest(override, problem):
    assert override_problem(override).startswith(problem)


@pytest.mark.parametrize(
    "override",
    [
        "train.epochs=2",
        "features.fmllr.dim=40",
        "distributed=adpsgd",
        "experiment=hybrid",
        "synth=tiny",
        "data.swbd_dir=/corpora/LDC97S62 v2=x",
        "gmm.realign_iters=[3,6,9]",
        "exp_name=x",
        "hydra.run.dir=.",
        "~train.max_steps",
    ],
)
def test_valid_overrides_pass(override):
    assert override_problem(override) is None


def test_every_group_of_the_schema_has_its_choices():
    assert "tiny" in group_choices("synth") and "hybrid" in group_choices("experiment")
    assert group_choices("exp_name") is None


def test_the_command_prints_each_problem_and_exits_2(capsys):
    assert main(["train.epochs=2"]) == 0 and capsys.readouterr().out == ""
    assert main(["train.epoch=2", "model=nope"]) == 2
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0].startswith("train.epoch:") and out[1].startswith("model=nope:")


def test_a_renamed_key_works_and_says_its_new_name(capsys):
    assert main(["train.max_train_utts=10"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "train.max_train_utts is now train.subset_utts" in captured.err
