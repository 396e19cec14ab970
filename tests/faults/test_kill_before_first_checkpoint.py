"""Issue 30, item 1: a decentralized learner killed after the other nodes wrote their first node
checkpoint and before it wrote its own. torchrun's restart must go on from what the nodes saved
(their average, the rest of the epoch re-planned; the killed node's steps trained again), say
so in the log, and lose or repeat no utterance (the learners' own records)."""

from __future__ import annotations

import subprocess
import uuid
from collections import Counter

import pytest

from asr.train.record import read_record, record_path
from tests.distributed.conftest import REPO, torchrun_command, train_overrides, worker_env

pytestmark = pytest.mark.slow

# 20 batches of 2 utterances, claimed by 2 nodes of one learner; a node checkpoint every 2 of
# a node's steps.
RUN = [
    "distributed=adpsgd",
    "distributed.timeout_s=60",
    "train.max_utts=2",
    "train.max_frames=200",
    "train.epochs=1",
    "train.checkpoint_every_steps=2",
    "train.log_every_steps=100",
    "train.tensorboard=false",
    "train.record_utterances=true",
]


@pytest.mark.parametrize("victim", [0, 1])  # the active learner (and writer), the passive one
def test_learner_killed_before_its_first_node_checkpoint_resumes(toy_corpus, tmp_path, victim):
    exp = tmp_path / "exp"
    cmd = torchrun_command(
        2, ["tests.faults.killed_train", *train_overrides(toy_corpus, *RUN, f"exp_dir={exp}")], "--max-restarts=1"
    )
    env = worker_env(ASR_TEST_KILL=str(victim), ASR_TEST_JOB=uuid.uuid4().hex)
    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-6000:]
    assert f"node {victim} has no checkpoint" in done.stderr, done.stderr[-6000:]
    assert "merged the 1 of the 2 nodes' checkpoints" in done.stderr and "replan start" in done.stderr

    utts = [line.split()[0] for line in (toy_corpus / "data" / "train" / "text").read_text().splitlines()]
    trained = Counter(utt for rank in range(2) for _, _, batch in read_record(record_path(exp, rank)) for utt in batch)
    lost = sorted(set(utts) - set(trained))
    repeated = sorted(u for u, n in trained.items() if n > 1)
    assert not lost and not repeated, f"lost {lost}, repeated {repeated}"
