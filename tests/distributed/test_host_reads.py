"""SSGD's steps under torchrun (2 learners on gloo): one host read a step on every learner, the
stop request riding in the token counts' all-reduce instead of a sum over learners of its own
every step (issue 52; the GPU's own check, a CUDA sync debug mode, is in tests/gpu)."""

from __future__ import annotations

import json

import pytest

from .conftest import run_torchrun, train_overrides

pytestmark = pytest.mark.slow

RUN = ["train.max_utts=2", "train.max_frames=200", "train.epochs=2", "train.log_every_steps=1000",
       "train.checkpoint_every_steps=1000", "distributed=ssgd", "distributed.timeout_s=60"]  # fmt: skip


def test_an_ssgd_step_reads_the_device_once_and_sums_nothing_else(toy_corpus, tmp_path):
    out = tmp_path / "reads"
    done = run_torchrun(
        2, ["tests.distributed.count_reads", str(out), *train_overrides(toy_corpus, *RUN, f"exp_dir={tmp_path / 'e'}")]
    )
    assert done.returncode == 0, done.stderr[-4000:]
    for rank in (0, 1):
        counted = json.loads((out / f"reads.{rank}.json").read_text())
        steps = counted["per_step"]
        assert len(steps) >= 8 and all(reads == ["tolist"] for reads in steps), steps
        # the sums over learners outside the steps: a few an epoch (its end, the losses, the dev
        # set, the stop agreed after the last step), not one a step
        assert len(counted["sums"]) <= 4 * 2 < len(steps), counted["sums"]
