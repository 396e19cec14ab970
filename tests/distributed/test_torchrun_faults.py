"""Real torchrun jobs of `asr.train`: a killed learner makes torchrun restart the job, which
resumes from the last checkpoint (exactly under SSGD; each node from its own checkpoint under
H-ADPSGD); a run going on with 2, then 3, then 1 learner(s) (elastic); and one job
spread over two network hosts (network namespaces joined by a veth pair) with H-ADPSGD's
exchanges crossing the link."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import torch

from asr.config import load_config
from asr.train import loop
from asr.train.data import unpack_mask
from asr.train.trainlog import TrainLog

from .conftest import REPO, run_torchrun, torchrun_command, train_overrides, worker_env
from tests.fixtures.processes import workers_of
from tests.fixtures.ssgd_reference import SSGD_REFERENCE_RUN

pytestmark = pytest.mark.slow

# The reference run's settings (10 global batches of 4 per epoch, a checkpoint every 4 steps):
# the killed job must end exactly where the uninterrupted one did.
KILL_RUN = SSGD_REFERENCE_RUN


def final_weights(exp: Path) -> dict:
    return torch.load(exp / "checkpoints" / "last.pt", weights_only=True)["model"]


def log_rows(exp: Path) -> list:
    clean = lambda x: None if x != x else round(x, 6)  # noqa: E731
    return [(r.step, r.epoch, clean(r.train_loss), clean(r.dev_loss), clean(r.lr)) for r in TrainLog(exp).rows]


def test_killed_learner_restarts_and_resumes_from_the_last_checkpoint(toy_corpus, ssgd_reference, tmp_path):
    reference = ssgd_reference  # the uninterrupted run of the same KILL_RUN, trained once a session
    exp = tmp_path / "killed"
    job = uuid.uuid4().hex
    cmd = torchrun_command(
        2, ["asr.train", *train_overrides(toy_corpus, *KILL_RUN, f"exp_dir={exp}")], "--max-restarts=1"
    )
    log = tmp_path / "killed.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=worker_env(ASR_TEST_JOB=job), cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 240
        while not (exp / "checkpoints" / "step-000000008.pt").exists():  # mid-epoch 1
            assert proc.poll() is None and time.time() < deadline, log.read_text()[-4000:]
            time.sleep(0.02)
        os.kill(workers_of(job)[1], signal.SIGKILL)
        saved_at_kill = max(int(p.name[5:14]) for p in (exp / "checkpoints").glob("step-*.pt"))
        assert proc.wait(timeout=240) == 0, log.read_text()[-6000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    resumed = [int(s) for s in re.findall(r"\[rank0 asr\.train\.loop\] resumed from step (\d+)", text)]
    assert len(resumed) == 1 and resumed[0] >= saved_at_kill >= 8, text[-4000:]
    assert "Restarting" in text or "restart" in text.lower()
    # Model, optimizer, schedule, sampler position and every learner's RNG came back: the
    # restarted job ends with exactly the weights and log of the uninterrupted one.
    expected = final_weights(reference)
    got = final_weights(exp)
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name
    assert log_rows(exp) == log_rows(reference)
    state = torch.load(exp / "checkpoints" / "last.pt", weights_only=True)
    rngs = state["distributed"]["rng_by_rank"]
    assert len(rngs) == 2 and not torch.equal(rngs[0]["torch"], rngs[1]["torch"])  # each learner its own dropout


def kill_one_learner_and_resume(
    toy_corpus: Path, tmp_path: Path, overrides: list[str], nproc: int, victim: int, ready
) -> tuple[Path, str]:
    """Start the job with --max-restarts=1, SIGKILL learner `victim` once `ready(checkpoints dir)`;
    the job must still finish. Returns (exp, log)."""
    exp = tmp_path / "killed"
    job = uuid.uuid4().hex
    cmd = torchrun_command(
        nproc, ["asr.train", *train_overrides(toy_corpus, *overrides, f"exp_dir={exp}")], "--max-restarts=1"
    )
    log = tmp_path / "killed.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=worker_env(ASR_TEST_JOB=job), cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 240
        while not ready(exp / "checkpoints"):
            assert proc.poll() is None and time.time() < deadline, log.read_text()[-4000:]
            time.sleep(0.02)
        os.kill(workers_of(job)[victim], signal.SIGKILL)
        assert proc.wait(timeout=240) == 0, log.read_text()[-6000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    return exp, log.read_text()


def both_nodes_past_the_first_epoch(checkpoints: Path) -> bool:
    """Every node's newest checkpoint is of epoch 2 or later (so the nodes are one consistent set)."""
    for node in ("node-000", "node-001"):
        files = sorted((checkpoints / node).glob("step-*.pt"))
        if not files:
            return False
        try:
            if torch.load(files[-1], weights_only=True)["progress"]["epoch"] < 1:
                return False
        except (OSError, RuntimeError, EOFError):  # rotated away meanwhile
            return False
    return True


DECENTRALIZED_KILL_RUN = [
    "train.max_utts=2",
    "train.max_frames=200",
    "train.epochs=4",
    "train.checkpoint_every_steps=3",
    "train.log_every_steps=1",
    "distributed.timeout_s=60",
]


@pytest.mark.parametrize("algorithm,nproc,victim", [("hadpsgd", 4, 3)])
def test_decentralized_learners_resume_from_their_own_checkpoints_after_a_kill(
    toy_corpus, tmp_path, algorithm, nproc, victim
):
    """H-ADPSGD as 2 nodes x 2 (learner 3 is node 1's second learner), killed once the first
    epoch's average and both nodes' checkpoints are saved. After the restart every node goes on
    from its own node checkpoint, and what was left of the interrupted epoch is trained: every
    epoch ends with an average that is evaluated and saved.

    ADPSGD (nodes of one learner) is the same resume with one learner a node: its torchrun job
    of 2 learners killed and restarted is tests/faults/test_resume_claims.py's (every utterance
    trained once) and test_kill_before_first_checkpoint.py's, so it is not run a third time here."""
    overrides = [*DECENTRALIZED_KILL_RUN, f"distributed={algorithm}"] + (
        ["distributed.learners_per_node=2"] if algorithm == "hadpsgd" else []
    )
    exp, text = kill_one_learner_and_resume(
        toy_corpus, tmp_path, overrides, nproc, victim, both_nodes_past_the_first_epoch
    )
    resumed = re.findall(
        r"\[rank(\d+) asr\.train\.loop\] resumed from step (\d+) \(epoch (\d+), (\d+) of its utterances trained; "
        r"own start",
        text,
    )
    assert sorted(int(r) for r, *_ in resumed) == list(range(nproc)), text[-4000:]
    state = torch.load(exp / "checkpoints" / "last.pt", weights_only=True)
    assert state["progress"]["epoch"] == 4 and all(torch.isfinite(t).all() for t in state["model"].values())
    dev = [r.dev_loss for r in TrainLog(exp).rows if r.dev_loss == r.dev_loss]
    assert len(dev) == 4 and dev[-1] < dev[0]  # one average per epoch; it learns
    nodes = sorted(p.name for p in (exp / "checkpoints").glob("node-*"))
    assert nodes == ["node-000", "node-001"]


def test_elastic_two_then_three_learners_then_one(toy_corpus, tmp_path, caplog):
    """ADPSGD stopped mid-epoch (train.max_steps) with 2 learners, resumed with 3, stopped again,
    finished by one learner without torchrun: every change of the number of learners merges the nodes'
    checkpoints into their average and re-splits what is left of the epoch."""
    exp = tmp_path / "elastic"
    common = train_overrides(
        toy_corpus,
        "train.max_utts=2",
        "train.max_frames=200",
        "train.epochs=2",
        "train.checkpoint_every_steps=100",
        "distributed.timeout_s=60",
        f"exp_dir={exp}",
    )
    first = run_torchrun(2, ["asr.train", *common, "distributed=adpsgd", "train.max_steps=26"])  # 20 batches per epoch
    assert first.returncode == 0, first.stderr[-4000:]
    nodes = [
        torch.load(max((exp / "checkpoints" / f"node-{n:03d}").glob("step-*.pt")), weights_only=True) for n in range(2)
    ]
    expected = {k: (nodes[0]["model"][k] + nodes[1]["model"][k]) / 2 for k in nodes[0]["model"]}
    trained = sum(int(unpack_mask(n["sampler"]["trained"], 40).sum()) for n in nodes)
    assert all(n["progress"]["epoch"] == 1 for n in nodes) and trained == 12  # 6 batches of 2 into epoch 2

    second = run_torchrun(3, ["asr.train", *common, "distributed=adpsgd", "train.max_steps=6"])
    assert second.returncode == 0, second.stderr[-4000:]
    assert "merged the 2 nodes' checkpoints (epoch 2, 12 of 40 utterances of it trained)" in second.stderr
    assert "replan start" in second.stderr
    merged = [torch.load(p, weights_only=True) for p in (exp / "checkpoints").glob("step-*.pt")]
    merged = next(m for m in merged if m["distributed"].get("merged_from_nodes") == 2)
    for key, value in expected.items():
        torch.testing.assert_close(merged["model"][key], value)
    assert sorted(p.name for p in (exp / "checkpoints").glob("node-*")) == ["node-000", "node-001", "node-002"]

    # The one learner trains in this process: what is tested is a run without torchrun, not the
    # process boundary, and this saves a process start (importing torch: ~4 s CPU). A failure
    # raises here, as the process's exit status failed the test before.
    with caplog.at_level("INFO"):
        loop.train(load_config(common))
    assert "merged the 3 nodes' checkpoints (epoch 2, 24 of 40 utterances of it trained)" in caplog.text
    state = torch.load(exp / "checkpoints" / "last.pt", weights_only=True)
    assert state["progress"]["epoch"] == 2 and not list((exp / "checkpoints").glob("node-*"))


# --- two hosts --------------------------------------------------------------------------------


def sh(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True)


def skip_or_fail(reason: str, namespaces_work: bool) -> None:
    """Skip where network namespaces cannot be made; in CI (CI=true) a machine that can make
    them must run the test, so anything failing after that is a failure, not a skip."""
    if namespaces_work and os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture
def two_hosts():
    """Two network namespaces joined by a veth pair: 10.231.N.1 and 10.231.N.2."""
    if shutil.which("ip") is None:
        pytest.skip("two-host test: `ip` (iproute2) is not installed")
    tag = uuid.uuid4().hex[:6]
    hosts = [f"asr{tag}a", f"asr{tag}b"]
    links = [f"v{tag}a", f"v{tag}b"]
    subnet = f"10.231.{int(tag, 16) % 250 + 1}"
    made = sh("ip", "netns", "add", hosts[0])
    if made.returncode != 0:
        pytest.skip(
            f"two-host test: cannot create network namespaces here ({made.stderr.strip()}); "
            "it needs root (CAP_SYS_ADMIN)"
        )
    try:
        steps = [
            ["ip", "netns", "add", hosts[1]],
            ["ip", "link", "add", links[0], "type", "veth", "peer", "name", links[1]],
        ]
        for i in range(2):
            steps += [
                ["ip", "link", "set", links[i], "netns", hosts[i]],
                ["ip", "-n", hosts[i], "addr", "add", f"{subnet}.{i + 1}/24", "dev", links[i]],
                ["ip", "-n", hosts[i], "link", "set", links[i], "up"],
                ["ip", "-n", hosts[i], "link", "set", "lo", "up"],
            ]
        for step in steps:
            result = sh(*step)
            if result.returncode != 0:
                skip_or_fail(f"two-host test: `{' '.join(step)}` failed: {result.stderr.strip()}", namespaces_work=True)
        yield [(hosts[i], links[i], f"{subnet}.{i + 1}") for i in range(2)]
    finally:
        for host in hosts:
            sh("ip", "netns", "del", host)


def tx_bytes(host: str, link: str) -> int:
    return int(sh("ip", "netns", "exec", host, "cat", f"/sys/class/net/{link}/statistics/tx_bytes").stdout)


def test_hadpsgd_across_two_hosts_joined_by_a_veth_link(toy_corpus, tmp_path, two_hosts):
    exp = tmp_path / "two_hosts"
    endpoint = f"{two_hosts[0][2]}:29531"
    args = [
        "asr.train",
        *train_overrides(
            toy_corpus,
            "train.max_utts=2",
            "train.max_frames=200",
            "train.epochs=1",
            "train.checkpoint_every_steps=100",
            "distributed=hadpsgd",
            "distributed.timeout_s=60",
            f"exp_dir={exp}",
        ),
    ]
    before = tx_bytes(two_hosts[0][0], two_hosts[0][1])
    procs = []
    for node, (host, link, address) in enumerate(two_hosts):
        # The same command as on real machines (README), plus the host's own address: the
        # namespaces share this machine's hostname, which resolves to neither of them.
        launcher = ["ip", "netns", "exec", host, "env", f"GLOO_SOCKET_IFNAME={link}"]
        cmd = torchrun_command(
            2,
            args,
            "--nnodes=2",
            f"--node-rank={node}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}",
            "--rdzv-id=two-hosts",
            f"--local-addr={address}",
            f"--rdzv-conf=is_host={int(node == 0)}",
        )
        cmd.remove("--standalone")
        procs.append(
            subprocess.Popen(
                launcher + cmd, env=worker_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-5000:]
    sent = tx_bytes(two_hosts[0][0], two_hosts[0][1]) - before
    state = torch.load(exp / "checkpoints" / "last.pt", weights_only=True)
    steps = state["step"]
    weights = sum(t.numel() for t in state["model"].values())
    # Learner 0 (host a) is node 0's leader and learner 2 (host b) node 1's: they exchanged
    # every step, and the only way between the hosts is the veth link.
    assert f"learner 0: {steps} ADPSGD weight exchanges" in outputs[0]
    assert f"learner 2: {steps} ADPSGD weight exchanges" in outputs[1]
    assert "2 nodes x 2 learners" in outputs[0]
    assert sent >= steps * weights * 4, (sent, steps, weights)
    assert state["distributed"]["world_size"] == 4
