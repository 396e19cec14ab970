"""Issue 30, item 1: nobody exchanges weights before every learner has loaded its checkpoint.
A passive ADPSGD learner's server answers from the moment its updater exists; the passive here
takes 3 s longer than the active to load its node checkpoint, and the first weights its server
sends must be the loaded ones, never its freshly initialised ones."""

from __future__ import annotations

import pytest

from tests.distributed.conftest import run_torchrun, train_overrides

pytestmark = pytest.mark.slow

RUN = [
    "distributed=adpsgd",
    "distributed.timeout_s=60",
    "train.max_utts=2",
    "train.max_frames=200",
    "train.epochs=1",
    "train.checkpoint_every_steps=100",
    "train.tensorboard=false",
]


def test_no_exchange_before_the_slow_passive_has_loaded_its_checkpoint(toy_corpus, tmp_path):
    exp = tmp_path / "exp"
    args = train_overrides(toy_corpus, *RUN, f"exp_dir={exp}")
    first = run_torchrun(2, ["asr.train", *args, "train.max_steps=4"])  # of the epoch's 20 batches
    assert first.returncode == 0, first.stderr[-4000:]
    assert all(any((exp / "checkpoints" / f"node-00{n}").glob("step-*.pt")) for n in range(2))

    passive = 1  # node 1 of the ring of two
    # The rest of the epoch (16 batches): the passive waits after its first until it has served
    # an exchange (tests/faults/slow_resume_train.py), so the active learner trains some of them.
    second = run_torchrun(2, ["tests.faults.slow_resume_train", *args], env={"ASR_TEST_SLOW_RESUME": str(passive)})
    assert second.returncode == 0, second.stderr[-4000:]
    assert "own start" in second.stderr
    assert (exp / "first-served.txt").read_text() == "loaded"
