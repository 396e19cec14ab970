"""TensorBoard scalars a training run writes, read back with TensorBoard's own reader."""

from __future__ import annotations

import shutil

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from asr.config import load_config
from asr.train import loop
from asr.train.trainlog import TrainLog
from tests.fixtures.toy_corpus import toy_overrides


@pytest.fixture(scope="module")
def trained(toy_corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("telemetry") / "toy"
    shutil.copytree(toy_corpus, root)
    loop.train(load_config(toy_overrides(root, ["train.epochs=2", "train.log_every_steps=2"])))
    return root / "exp"


def scalars(exp) -> dict[str, list]:
    events = EventAccumulator(str(exp / "tensorboard" / "learner-0"))
    events.Reload()
    return {tag: events.Scalars(tag) for tag in events.Tags()["scalars"]}


def test_every_log_row_and_epoch_end_is_in_tensorboard(trained):
    found = scalars(trained)
    assert {
        "train/loss",
        "train/lr",
        "speed/frames_per_second",
        "wait/data_seconds",
        "wait/communication_seconds",
        "epoch/train_loss",
        "epoch/dev_loss",
    } <= set(found)
    rows = TrainLog(trained).rows
    steps = [r for r in rows if r.dev_loss != r.dev_loss and r.train_loss == r.train_loss]
    assert [e.step for e in found["train/loss"]] == [r.step for r in steps]
    assert [e.value for e in found["train/loss"]] == pytest.approx([r.train_loss for r in steps], rel=1e-5)
    assert [e.value for e in found["train/lr"]] == pytest.approx([r.lr for r in steps], rel=1e-5)
    dev = [r.dev_loss for r in rows if r.dev_loss == r.dev_loss]
    assert [e.value for e in found["epoch/dev_loss"]] == pytest.approx(dev, rel=1e-5)
    assert all(e.value > 0 for e in found["speed/frames_per_second"])
