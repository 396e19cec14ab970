"""The real updaters in real processes (forked learners on gloo, tests/distributed/learner_jobs.py):
ADPSGD/H-ADPSGD exchanges, learners' spread, straggler independence, clean shutdown (20 times),
and a learner that stops answering hitting a timeout with a clear error instead of a hang."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

JOBS = Path(__file__).with_name("learner_jobs.py")
ABORT_SIGNS = ("terminate called", "Aborted", "core dumped", "Traceback", "Fatal Python error", "what():")


# Every job of this module, run by one driver process (it imports torch once).
JOB_SPECS = [
    {"name": "straggler", "learners": 4, "algorithm": "adpsgd", "steps": 12, "slow_rank": 1, "slow_s": 0.1},
    {"name": "shutdown", "learners": 2, "algorithm": "adpsgd", "steps": 4, "repeat": 20},
    {"name": "frozen-passive", "learners": 2, "algorithm": "adpsgd", "steps": 20, "freeze_rank": 1, "freeze_step": 5, "timeout_s": 3},
    {"name": "frozen-active", "learners": 2, "algorithm": "adpsgd", "steps": 20, "freeze_rank": 0, "freeze_step": 5, "timeout_s": 3},
    {"name": "frozen-ssgd", "learners": 2, "algorithm": "ssgd", "steps": 20, "freeze_rank": 1, "freeze_step": 5, "timeout_s": 3},
]


@pytest.fixture(scope="module")
def jobs() -> dict[str, list[list[dict]]]:
    proc = subprocess.run([sys.executable, str(JOBS), json.dumps(JOB_SPECS)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, list[list[dict]]] = {}
    for line in proc.stdout.splitlines():
        job = json.loads(line)
        out.setdefault(job["name"], []).append(job["learners"])
    return out


def assert_clean(learners: list[dict]) -> None:
    for learner in learners:
        assert learner["exit"] == 0, learner
        assert not any(sign in learner["stderr"] for sign in ABORT_SIGNS), learner["stderr"][-2000:]


def test_a_straggler_slows_nobody_under_adpsgd(jobs):
    """Learner 1 (passive) sleeps 0.1 s after every step: its server thread still answers at
    once, so the other learners' steps do not wait for it (under SSGD every step would)."""
    [learners] = jobs["straggler"]
    assert_clean(learners)
    slow = learners[1]["train_s"]
    fast = max(l["train_s"] for r, l in enumerate(learners) if r != 1)
    assert slow >= 1.2 and fast < 0.5 * slow, (fast, slow)
    assert [l["exchanges"] for l in learners] == [12] * 4
    assert all(l["weights"] == learners[0]["weights"] for l in learners)  # the consensus


def test_clean_shutdown_twenty_times(jobs):
    """Each time: exchanges, goodbyes, process group destroyed, the normal interpreter exit."""
    assert len(jobs["shutdown"]) == 20
    for learners in jobs["shutdown"]:
        assert_clean(learners)
        assert [l["exchanges"] for l in learners] == [4, 4]


@pytest.mark.parametrize("job,frozen,message", [
    ("frozen-passive", 1, r"learner 0: no answer from learner 1 to the ADPSGD weight exchange of step \d+ within distributed.timeout_s=3"),
    # The passive learner trains on without waiting for its frozen active neighbour, until the
    # epoch end, where every learner must take part in the average.
    ("frozen-active", 0, r"learner 1: waiting for every learner at the epoch end failed \(.*Timed out.*\). Another learner died, hung or cannot be reached within distributed.timeout_s=3"),
    ("frozen-ssgd", 1, r"learner 0: gradient all-reduce \(token counts\) failed \(.*Timed out.*\). Another learner died, hung or cannot be reached"),
])
def test_a_learner_that_stops_answering_is_a_clear_error_not_a_hang(jobs, job, frozen, message):
    """The frozen learner (SIGSTOP) is killed by the driver once the other has exited."""
    [learners] = jobs[job]
    other = learners[1 - frozen]
    assert other["exit"] == 3  # asr.distributed.context.EXIT_DISTRIBUTED_ERROR
    assert other["seconds"] < 30  # the 3 s timeout, plus start-up; never a hang
    assert re.search(message, other["error"]), other["error"]
    assert re.search(message, other["stderr"])  # and in its log
