"""Issue 31, item 2: one training per experiment. A second run is refused (exit 2, one line
naming the holder) and train.restart moves nothing while the lock is held; a lock left by a
process that is gone is taken over, with a log line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from asr.config import load_config
from asr.train import loop
from asr.utils.errors import InputError
from asr.utils.lock import DirLock, process_start
from tests.faults.conftest import run_stage
from tests.fixtures.toy_corpus import toy_overrides

LOCK = "train.lock"  # asr.train.loop.LOCK_NAME, spelt out: the on-disk name users see


@pytest.fixture
def root(toy_corpus, tmp_path) -> Path:
    shutil.copytree(toy_corpus, tmp_path / "toy")
    return tmp_path / "toy"


def overrides(root: Path, *extra: str) -> list[str]:
    return toy_overrides(root, ["train.epochs=1", *extra])


def write_lock(exp: Path, pid: int) -> Path:
    lock = DirLock(exp / LOCK, "x")
    exp.mkdir(parents=True, exist_ok=True)
    holder = dict(lock.me, pid=pid, process_start=process_start(pid), job="")
    lock.path.write_text(json.dumps(holder) + "\n")
    return lock.path


def test_a_second_training_of_a_running_experiment_is_refused_with_one_line_restart_or_not(root, monkeypatch):
    seen = {}
    original = loop.Trainer.train_batch

    def train_batch(self, batch):  # while the first run trains, a second one starts
        if not seen:
            seen["second"] = run_stage("asr.train", overrides(root, "train.restart=true"), cwd=root, timeout=120)
        original(self, batch)

    monkeypatch.setattr(loop.Trainer, "train_batch", train_batch)
    loop.train(load_config(overrides(root)))
    for proc in seen.values():
        assert proc.returncode == 2, proc.stderr[-3000:]
        errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
        assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert f"train.lock: the training of {root / 'exp'} is in use by pid {os.getpid()}" in errors[0]
    assert not (root / "exp" / "previous").exists()  # the restart moved nothing of the live run
    assert not (root / "exp" / LOCK).exists()  # released at the end


def test_train_restart_is_refused_while_another_process_holds_the_lock(root):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        loop.train(load_config(overrides(root)))
        lock = write_lock(root / "exp", holder.pid)
        with pytest.raises(InputError, match=rf"is in use by pid {holder.pid} on .*wait for it or stop it"):
            loop.train(load_config(overrides(root, "train.restart=true")))
        assert (root / "exp" / "checkpoints").is_dir() and not (root / "exp" / "previous").exists()
        assert lock.is_file()  # still the holder's
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_left_by_a_dead_process_is_taken_over(root, caplog):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    write_lock(root / "exp", int(gone.stdout))
    with caplog.at_level("WARNING"):
        loop.train(load_config(overrides(root)))
    assert f"taking over the lock of pid {gone.stdout.strip()}" in caplog.text and "is no longer running" in caplog.text
    assert not (root / "exp" / LOCK).exists()
