"""Issue 31, item 4: a hung learner is found within seconds of the steps it usually takes (ten
times the slowest step, at least STEP_HANG_MIN_S), and the one line printed names the learner
the others wait for and what it was doing."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from asr.distributed import context
from tests.distributed.conftest import REPO, torchrun_command, train_overrides, worker_env


def test_the_limit_inside_the_steps_follows_the_slowest_step():
    watchdog = context.HangWatchdog()
    watchdog.limit_s = 1860.0
    assert watchdog.current_limit()[0] == 1860.0  # start-up: the index may be building on learner 0
    watchdog.stepping = True
    watchdog.step_done(1, 0.4)
    watchdog.step_done(2, 2.0)
    assert watchdog.current_limit()[0] == max(context.STEP_HANG_MIN_S, context.STEP_HANG_FACTOR * 2.0) < 300
    watchdog.step_done(3, 100.0)
    assert watchdog.current_limit()[0] == 1000.0
    watchdog.stepping = False  # epoch ends wait for the slowest learner: the whole timeout
    assert watchdog.current_limit()[0] == 1860.0


@pytest.mark.slow
def test_a_learner_hung_mid_epoch_is_named_within_seconds(toy_corpus, tmp_path):
    overrides = train_overrides(
        toy_corpus,
        "train.max_utts=2",
        "train.max_frames=200",
        "train.epochs=1",
        "distributed=ssgd",
        "train.checkpoint_every_steps=100",
        f"exp_dir={tmp_path / 'exp'}",
    )  # distributed.timeout_s: 1800
    started = time.monotonic()
    proc = subprocess.run(
        torchrun_command(2, ["tests.faults.hung_train", *overrides]),
        env=worker_env(ASR_TEST_HANG="1:4"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and time.monotonic() - started < 100, text[-4000:]
    line = next((row for row in text.splitlines() if "ERROR [rank0" in row and "got no answer" in row), None)
    assert line is not None, text[-4000:]
    assert re.search(
        r"learner 0: gradient all-reduce.* got no answer for \d+ s \(limit 3 s: 10 x the slowest step", line
    ), line
    assert "learner 1 is behind (step 5, computing (not in a collective))" in line, line
