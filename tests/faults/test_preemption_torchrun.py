"""Issue 31, item 1 under torchrun: a SIGTERM that reaches only one learner stops every learner
at the same step boundary (none is left waiting in a collective or an exchange), each saves
its part and exits 75, and the rerun goes on exactly: SSGD ends with the uninterrupted run's
weights; under ADPSGD and H-ADPSGD every utterance of the epoch is trained exactly once."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from asr.train.data import unpack_mask
from asr.utils.stop import EXIT_PREEMPTED
from tests.distributed.conftest import REPO, run_torchrun, torchrun_command, train_overrides, worker_env
from tests.fixtures.ssgd_reference import SSGD_REFERENCE_RUN

pytestmark = pytest.mark.slow

RUN = [
    "train.max_utts=2",
    "train.max_frames=200",
    "train.epochs=2",
    "train.checkpoint_every_steps=100",
    "train.log_every_steps=1",
    "distributed.timeout_s=60",
]


def signal_one_learner(
    toy_corpus: Path, exp: Path, run: list[str], victim: int, after: int, nproc: int = 2, hold: str = ""
) -> str:
    """Run the job (settings `run`, `nproc` learners) with learner `victim` alone sending itself
    SIGTERM in its batch `after` + 1 (tests/faults/signalled_train.py; `hold`: ASR_TEST_HOLD, the
    learners that wait for the signal after their first batch); every learner must exit 75.
    Returns its output."""
    cmd = torchrun_command(
        nproc, ["tests.faults.signalled_train", *train_overrides(toy_corpus, *run, f"exp_dir={exp}")]
    )
    sent = exp.parent / f"{exp.name}.signal-sent"
    proc = subprocess.run(
        cmd,
        env=worker_env(ASR_TEST_SIGNAL=f"{victim}:{after}", ASR_TEST_HOLD=hold, ASR_TEST_SIGNAL_SENT=str(sent)),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    text = proc.stdout + proc.stderr
    statuses = re.findall(r"exitcode\s*:\s*(-?\d+)", text)
    assert proc.returncode != 0 and statuses and {int(s) for s in statuses} == {EXIT_PREEMPTED}, text[-4000:]
    assert "learner failed" not in text and "DistributedError" not in text, text[-4000:]
    return text


def test_ssgd_one_learner_signalled_all_stop_and_the_rerun_equals_the_uninterrupted_run(
    toy_corpus, ssgd_reference, tmp_path
):
    # The session's uninterrupted SSGD run (tests/fixtures/ssgd_reference.py) and its settings.
    reference, run = ssgd_reference, SSGD_REFERENCE_RUN
    exp = tmp_path / "stopped"
    text = signal_one_learner(toy_corpus, exp, run, victim=1, after=12)  # 10 steps an epoch, 4 between checkpoints
    stopped = [int(s) for s in re.findall(r"stopped by SIGTERM at step (\d+)", text)]
    assert len(stopped) == 1 and "SIGTERM received" in text, text[-4000:]  # learner 0 reports for all
    again = run_torchrun(2, ["asr.train", *train_overrides(toy_corpus, *run, f"exp_dir={exp}")])
    assert again.returncode == 0, again.stderr[-4000:]
    assert f"resumed from step {stopped[0]}" in again.stderr and "exact start" in again.stderr
    expected = torch.load(reference / "checkpoints" / "last.pt", weights_only=True)["model"]
    got = torch.load(exp / "checkpoints" / "last.pt", weights_only=True)["model"]
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name


# (learners, settings, the learner signalled, in its batch N + 1: mid-epoch, node 0's learners,
# held). Never learner 0's node, which evaluates at every epoch end while the other node claims
# on, so it may train too few batches to meet the signal. Node 0 trains one batch, then waits
# until the signal is sent: left to run, a node that started first could claim nearly all of an
# epoch's 20 batches before the signalled learner trained its few, and the stop then came at the
# epoch's end (nothing left).
DECENTRALIZED = {
    "adpsgd": (2, ["distributed=adpsgd", "train.epochs=4"], 1, 5, "0"),
    "hadpsgd": (4, ["distributed=hadpsgd", "distributed.learners_per_node=2", "train.epochs=4"], 3, 2, "0,1"),
}


@pytest.mark.parametrize("algorithm", sorted(DECENTRALIZED))
def test_decentralized_one_learner_signalled_every_node_saves_and_each_utterance_is_trained_once(
    toy_corpus, tmp_path, algorithm
):
    """Two nodes: ADPSGD's two learners, or H-ADPSGD's two nodes of two (the signalled learner 3
    is then not its node's leader: the stop must reach its node's leader and node 0)."""
    nproc, settings, victim, after, hold = DECENTRALIZED[algorithm]
    exp = tmp_path / "stopped"
    signal_one_learner(toy_corpus, exp, [*RUN, *settings], victim=victim, after=after, nproc=nproc, hold=hold)
    nodes = [
        torch.load(max((exp / "checkpoints" / f"node-{n:03d}").glob("step-*.pt")), weights_only=True) for n in range(2)
    ]
    masks = [unpack_mask(n["sampler"]["trained"], 40) for n in nodes]
    epoch = nodes[0]["progress"]["epoch"]
    assert epoch < 4 and all(n["progress"]["epoch"] == epoch for n in nodes)
    assert not np.any(masks[0] & masks[1])  # no utterance trained by both nodes
    trained = int((masks[0] | masks[1]).sum())
    assert trained < 40
    again = run_torchrun(nproc, ["asr.train", *train_overrides(toy_corpus, *RUN, *settings, f"exp_dir={exp}")])
    assert again.returncode == 0, again.stderr[-4000:]
    resumed = re.findall(
        r"resumed from step \d+ \(epoch (\d+), (\d+) of its utterances trained; own start", again.stderr
    )
    assert resumed == [(str(epoch + 1), str(trained))] * nproc, again.stderr[-4000:]
    # What is left (the rest of the epoch, re-planned) is trained by the rerun, and the epoch ends.
    assert torch.load(exp / "checkpoints" / "last.pt", weights_only=True)["progress"]["epoch"] == 4
