"""Issue 31, item 1: SIGTERM or SIGUSR1 (SLURM's warning before it kills a job) makes a training
save an exact checkpoint at the next step boundary and exit 75; the same command goes on as if
never interrupted. A data stage stops at once, exit 75, its atomic writes in progress removed."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from asr.config import load_config
from asr.models.checkpoint import CheckpointDir, load_checkpoint
from asr.train import loop
from asr.utils.stop import EXIT_PREEMPTED, Preempted
from tests.faults.conftest import features_overrides, tone, write_wav_data_dir
from tests.fixtures.toy_corpus import toy_overrides


def config(root: Path, *extra: str):
    return load_config(toy_overrides(root, ["train.checkpoint_every_steps=100", *extra]))


@pytest.fixture(scope="module")
def reference(toy_corpus, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("uninterrupted") / "toy"
    shutil.copytree(toy_corpus, root)
    loop.train(config(root))
    return root


def signal_after(monkeypatch, batches: int, signum: int) -> None:
    """Deliver `signum` to this process while batch `batches` + 1 is being trained."""
    original = loop.Trainer.train_batch
    count = {"n": 0}

    def train_batch(self, batch):
        count["n"] += 1
        if count["n"] == batches + 1:
            os.kill(os.getpid(), signum)
        original(self, batch)

    monkeypatch.setattr(loop.Trainer, "train_batch", train_batch)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1])
def test_a_signal_mid_epoch_saves_an_exact_checkpoint_and_the_rerun_equals_an_uninterrupted_run(
    reference, toy_corpus, tmp_path, monkeypatch, caplog, signum
):
    root = tmp_path / "toy"
    shutil.copytree(toy_corpus, root)
    per_epoch = load_checkpoint(reference / "exp" / "checkpoints" / "last.pt")["step"] // 2
    stop_at = per_epoch + 2  # mid-epoch 2, no periodic checkpoint since the epoch end
    with monkeypatch.context() as m:
        signal_after(m, stop_at - 1, signum)
        with pytest.raises(Preempted, match=f"stopped by {signal.Signals(signum).name}"):
            loop.train(config(root))
    assert signal.getsignal(signum) is signal.SIG_IGN  # about to exit: later signals cannot cut it short
    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_DFL)
    saved = CheckpointDir(root / "exp" / "checkpoints").periodic()[-1]
    assert saved.name == f"step-{stop_at:09d}.pt"  # the step being trained when the signal came, finished
    with caplog.at_level("INFO"):
        loop.train(config(root))
    assert f"resumed from step {stop_at} (epoch 2, batch 2; exact start" in caplog.text
    expected = load_checkpoint(reference / "exp" / "checkpoints" / "last.pt")["model"]
    got = load_checkpoint(root / "exp" / "checkpoints" / "last.pt")["model"]
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name


def test_a_data_stage_signalled_mid_set_stops_at_once_and_keeps_nothing_half_written(tmp_path):
    data = write_wav_data_dir(tmp_path, {f"sw0200{i}-A": tone(2.0, i) for i in range(1, 4)})
    for name in ("dev", "eval"):
        write_wav_data_dir(tmp_path, {f"{name}-A": tone(0.5)}, name)
    wav_scp = (data / "wav.scp").read_text()
    key, path = wav_scp.splitlines()[2].split(maxsplit=1)
    # The last recording takes a while to arrive, so the stage is surely inside its temporary dir.
    (data / "wav.scp").write_text(wav_scp.replace(f"{key} {path}\n", f"{key} sleep 5; cat {shlex.quote(path)} |\n"))
    out = tmp_path / "feats" / "logmel40"
    stage = subprocess.Popen(
        [sys.executable, "-m", "asr.features", *features_overrides(tmp_path)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    try:
        deadline = time.time() + 120
        while not list(out.glob(".train.tmp.*")) and time.time() < deadline and stage.poll() is None:
            time.sleep(0.05)
        assert list(out.glob(".train.tmp.*")), "the stage never reached its temporary directory"
        stage.send_signal(signal.SIGTERM)
        _, err = stage.communicate(timeout=60)
    finally:
        if stage.poll() is None:
            stage.kill()
    assert stage.returncode == EXIT_PREEMPTED, err[-3000:]
    assert "stage features stopped by SIGTERM; nothing half-written is kept" in err and "Traceback" not in err
    assert not list(out.glob(".*")) and not (out / "train").exists()  # no temporary left, no set that looks done
