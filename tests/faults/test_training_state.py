"""Issue 17, items 1 and 2: experiment state is written only once it is true, and a run never
restarts an experiment silently, overwrites a better best.pt or mixes runs in train_log.csv."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from asr.config import load_config
from asr.models.checkpoint import load_checkpoint
from asr.train import loop
from asr.train.trainlog import TrainLog
from asr.utils.errors import InputError
from tests.fixtures.toy_corpus import toy_overrides


@pytest.fixture
def root(toy_corpus, tmp_path) -> Path:
    shutil.copytree(toy_corpus, tmp_path / "toy")
    return tmp_path / "toy"


def train(root: Path, *extra: str):
    return loop.train(load_config(toy_overrides(root, ["train.epochs=2", *extra])))


def test_a_run_that_fails_before_training_leaves_no_snapshot(root):
    with pytest.raises(InputError, match="nosuchset: data directory not found"):
        train(root, "data.train_set=nosuchset")
    assert not (root / "exp" / "train_config.yaml").exists()
    train(root, "model.hidden_size=32")  # a corrected run with another model is not refused
    assert "hidden_size: 32" in (root / "exp" / "train_config.yaml").read_text()


def test_a_failed_forced_resume_keeps_the_snapshot_of_what_trained(root):
    train(root, "train.epochs=1")
    with pytest.raises(InputError, match="does not fit the configured model"):
        train(root, "model.hidden_size=32", "train.force=true")
    assert "hidden_size: 24" in (root / "exp" / "train_config.yaml").read_text()
    train(root)  # the original config goes on, unforced


def test_unreadable_checkpoints_fall_back_to_best_pt_and_the_log_is_not_mixed(root, caplog):
    train(root, "train.epochs=1")
    best = load_checkpoint(root / "exp" / "checkpoints" / "best.pt")
    for path in (root / "exp" / "checkpoints").glob("step-*.pt"):
        path.write_bytes(b"not a checkpoint")
    with caplog.at_level("WARNING"):
        train(root)
    assert f"going on from {root / 'exp' / 'checkpoints' / 'best.pt'} (end of epoch 1)" in caplog.text
    rows = TrainLog(root / "exp").rows
    steps = [r.step for r in rows]
    assert steps == sorted(steps)  # rows after best.pt's step were dropped before training them again
    assert [r.epoch for r in rows if r.dev_loss == r.dev_loss] == [1, 2]
    assert load_checkpoint(root / "exp" / "checkpoints" / "last.pt")["progress"]["epoch"] == 2
    assert best["step"] in steps


def test_history_without_any_checkpoint_refuses_until_restart(root, caplog):
    train(root, "train.epochs=1")
    rows_before = len(TrainLog(root / "exp").rows)
    shutil.rmtree(root / "exp" / "checkpoints")
    with pytest.raises(
        InputError, match=r"an earlier run left train_log.csv but no checkpoint to go on from.*train.restart=true"
    ):
        train(root)
    with caplog.at_level("WARNING"):
        train(root, "train.restart=true")
    moved = root / "exp" / "previous" / "1"
    assert len(TrainLog(moved).rows) == rows_before and (moved / "train_config.yaml").is_file()
    rows = TrainLog(root / "exp").rows
    assert rows[0].step <= 3 and [r.step for r in rows] == sorted(r.step for r in rows)  # a fresh log
    assert [r.epoch for r in rows if r.dev_loss == r.dev_loss] == [1, 2]
    assert "train.restart=true: moved" in caplog.text


def test_a_run_stopped_before_its_first_checkpoint_is_trained_again_not_refused(root, monkeypatch, caplog):
    """Killed after logging 3 steps, before any checkpoint was due: the re-run starts afresh
    (as a resume trains again what came after its checkpoint), with one log of its own steps."""
    original, seen = loop.Trainer.train_batch, []

    def killed_at_the_fourth_batch(self, batch):
        if len(seen) == 3:
            raise KeyboardInterrupt  # the run dies here, as under kill -9
        seen.append(batch)
        original(self, batch)

    monkeypatch.setattr(loop.Trainer, "train_batch", killed_at_the_fourth_batch)
    with pytest.raises(KeyboardInterrupt):
        train(root, "train.log_every_steps=1", "train.checkpoint_every_steps=1000")
    monkeypatch.undo()
    assert [r.step for r in TrainLog(root / "exp").rows] == [1, 2, 3]
    assert not list((root / "exp" / "checkpoints").rglob("*.pt"))
    with caplog.at_level("WARNING"):
        train(root, "train.log_every_steps=1", "train.checkpoint_every_steps=1000")
    assert "stopped before its first checkpoint (3 steps logged" in caplog.text
    steps = [r.step for r in TrainLog(root / "exp").rows if r.train_loss == r.train_loss]
    assert steps == list(range(1, steps[-1] + 1))  # every step once: the killed run's rows are gone
    assert load_checkpoint(root / "exp" / "checkpoints" / "last.pt")["progress"]["epoch"] == 2
