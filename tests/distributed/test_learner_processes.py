"""The real updaters in real processes (forked learners on gloo, tests/distributed/learner_jobs.py):
ADPSGD/H-ADPSGD exchanges (exactly the average, the sum kept), straggler independence, clean shutdown (20 times,
with the fixed and the randomized ring, the exponential graph), delay-by-one's average one step late, 16 learners
claiming an epoch (three topologies and H-ADPSGD 4x4), and a learner
that stops answering hitting a timeout with a clear error instead of a hang."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from asr.distributed.topology import Layout

pytestmark = pytest.mark.slow

JOBS = Path(__file__).with_name("learner_jobs.py")
ABORT_SIGNS = ("terminate called", "Aborted", "core dumped", "Traceback", "Fatal Python error", "what():")


# The job whose test compares learners' speeds: run alone (`exclusive`), by a driver of its own.
STRAGGLER_SPECS = [
    {"name": "straggler", "learners": 4, "algorithm": "adpsgd", "steps": 12, "slow_rank": 1, "slow_s": 0.1},
]

# Every other job of this module, run by one driver process (it imports torch once). The three
# jobs with a frozen learner start together: each waits out its own 3 s timeout, side by side.
JOB_SPECS = [
    {"name": "shutdown", "learners": 2, "algorithm": "adpsgd", "steps": 4, "repeat": 20},
    {
        "name": "shutdown-random-ring",
        "learners": 4,
        "algorithm": "adpsgd",
        "topology": "random_ring",
        "steps": 4,
        "repeat": 20,
    },
    {
        "name": "shutdown-exponential",
        "learners": 4,
        "algorithm": "adpsgd",
        "topology": "exponential",
        "steps": 4,
        "repeat": 10,
    },
    {
        "name": "mixing-random-ring-delayed",
        "learners": 4,
        "algorithm": "adpsgd",
        "topology": "random_ring",
        "delay_by_one": True,
        "steps": 6,
        "own_start": True,
        "mix_only": True,
    },
    {
        "name": "one-exchange-delayed",
        "learners": 2,
        "algorithm": "adpsgd",
        "delay_by_one": True,
        "steps": 2,
        "own_start": True,
        "mix_only": True,
        "trace": True,
    },
    {
        "name": "frozen-passive",
        "together": "frozen",
        "learners": 2,
        "algorithm": "adpsgd",
        "steps": 20,
        "freeze_rank": 1,
        "freeze_step": 5,
        "timeout_s": 3,
    },
    {
        "name": "frozen-active",
        "together": "frozen",
        "learners": 2,
        "algorithm": "adpsgd",
        "steps": 20,
        "freeze_rank": 0,
        "freeze_step": 5,
        "timeout_s": 3,
    },
    {
        "name": "frozen-ssgd",
        "together": "frozen",
        "learners": 2,
        "algorithm": "ssgd",
        "steps": 20,
        "freeze_rank": 1,
        "freeze_step": 5,
        "timeout_s": 3,
    },
    {"name": "one-exchange", "learners": 2, "algorithm": "adpsgd", "steps": 1, "own_start": True, "mix_only": True},
    {"name": "idle-learner", "learners": 4, "algorithm": "adpsgd", "optimizer": "adam", "steps": 3, "idle_rank": 0},
    {"name": "mixing", "learners": 4, "algorithm": "adpsgd", "steps": 6, "own_start": True, "mix_only": True},
    *(
        {
            "name": f"16-{name}",
            "learners": 16,
            "algorithm": algorithm,
            "plan": 96,
            "steps": 0,
            "pace_s": 0.02,
            "own_start": True,
            "mix_only": True,
            "timeout_s": 300,
        }
        | extra
        for name, algorithm, extra in (
            ("ring", "adpsgd", {}),
            ("random-ring", "adpsgd", {"topology": "random_ring"}),
            ("exponential", "adpsgd", {"topology": "exponential"}),
            ("hadpsgd-4x4", "hadpsgd", {"per_node": 4}),
        )
    ),
]


def run_jobs(specs: list[dict]) -> dict[str, list[list[dict]]]:
    proc = subprocess.run([sys.executable, str(JOBS), json.dumps(specs)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, list[list[dict]]] = {}
    for line in proc.stdout.splitlines():
        job = json.loads(line)
        out.setdefault(job["name"], []).append(job["learners"])
    return out


@pytest.fixture(scope="module")
def jobs() -> dict[str, list[list[dict]]]:
    return run_jobs(JOB_SPECS)


@pytest.fixture(scope="module")
def straggler_jobs() -> dict[str, list[list[dict]]]:
    return run_jobs(STRAGGLER_SPECS)


def assert_clean(learners: list[dict]) -> None:
    for learner in learners:
        exited = f"learner {learner.get('rank')} exited with {learner['exit']}"
        assert learner["exit"] == 0, f"{exited}; its stderr ends: {learner['stderr'][-3000:]}"
        assert not any(sign in learner["stderr"] for sign in ABORT_SIGNS), learner["stderr"][-2000:]


@pytest.mark.exclusive  # compares the learners' training times: another test's load would skew them
def test_a_straggler_slows_nobody_under_adpsgd(straggler_jobs):
    """Learner 1 (passive) sleeps 0.1 s after every step: its server thread still answers at
    once, so the other learners' steps do not wait for it (under SSGD every step would)."""
    [learners] = straggler_jobs["straggler"]
    assert_clean(learners)
    slow = learners[1]["train_s"]
    fast = max(learner["train_s"] for r, learner in enumerate(learners) if r != 1)
    assert slow >= 1.2 and fast < 0.5 * slow, (fast, slow)
    assert [learner["exchanges"] for learner in learners] == [12] * 4
    assert all(learner["weights"] == learners[0]["weights"] for learner in learners)  # the consensus


def test_clean_shutdown_twenty_times(jobs):
    """Each time: exchanges, goodbyes, process group destroyed, the normal interpreter exit."""
    assert len(jobs["shutdown"]) == 20
    for learners in jobs["shutdown"]:
        assert_clean(learners)
        assert [learner["exchanges"] for learner in learners] == [4, 4]


def test_random_ring_shuts_down_cleanly_twenty_times(jobs):
    """4 learners, a random active/passive matching per round: every passive may meet every
    active, so each waits for both actives' goodbyes; each time every learner exits cleanly."""
    assert len(jobs["shutdown-random-ring"]) == 20
    for learners in jobs["shutdown-random-ring"]:
        assert_clean(learners)
        assert [learners[r]["exchanges"] for r in (0, 2)] == [4, 4]  # an exchange per step of each active
        assert learners[1]["exchanges"] + learners[3]["exchanges"] == 8  # each served by one passive


def test_exponential_graph_shuts_down_cleanly_ten_times(jobs):
    """4 learners on the hypercube: actives 0 and 3 (an even number of one bits) pair with 1
    and 2 in turn (distance 1, then 2); each passive serves both actives and waits for both
    goodbyes; each time every learner exits cleanly."""
    assert len(jobs["shutdown-exponential"]) == 10
    for learners in jobs["shutdown-exponential"]:
        assert_clean(learners)
        assert [learners[r]["exchanges"] for r in range(4)] == [4, 4, 4, 4]  # every step a perfect matching


@pytest.mark.parametrize(
    "job,frozen,message",
    [
        (
            "frozen-passive",
            1,
            r"learner 0: "
            r"no answer from learner 1 to the ADPSGD weight exchange of step \d+ within distributed.timeout_s=3",
        ),
        # The passive learner trains on without waiting for its frozen active neighbour, until the
        # epoch end, where every learner must take part in the average.
        (
            "frozen-active",
            0,
            r"learner 1: waiting for every learner at the epoch end failed \(.*Timed out.*\). Another learner died, "
            r"hung or cannot be reached within distributed.timeout_s=3",
        ),
        (
            "frozen-ssgd",
            1,
            r"learner 0: gradient all-reduce \(token counts\) failed \(.*Timed out.*\). Another learner died, "
            r"hung or cannot be reached",
        ),
    ],
)
def test_a_learner_that_stops_answering_is_a_clear_error_not_a_hang(jobs, job, frozen, message):
    """The frozen learner (SIGSTOP) is killed by the driver once the other has exited."""
    [learners] = jobs[job]
    other = learners[1 - frozen]
    assert other["exit"] == 3  # asr.distributed.context.EXIT_DISTRIBUTED_ERROR
    assert other["seconds"] < 30  # the 3 s timeout, plus start-up; never a hang
    assert re.search(message, other["error"]), other["error"]
    assert re.search(message, other["stderr"])  # and in its log


def test_a_learner_that_took_no_step_still_averages_its_optimizer_moments(jobs):
    """A slow learner can claim no batch of a short epoch (asr.distributed.claims): it has
    updated nothing, yet the epoch end averages every learner's weights and Adam moments.
    Its moments are zeros, as the other learners' were before their first update."""
    [learners] = jobs["idle-learner"]
    assert_clean(learners)
    assert learners[0]["exchanges"] == 0 and learners[2]["exchanges"] == 3
    moments = torch.tensor(learners[0]["moments"])
    assert moments.numel() == 2 * (8 * 4 + 4)  # exp_avg and exp_avg_sq of the weight and the bias
    assert moments.abs().sum() > 0
    assert all(learner["moments"] == learners[0]["moments"] for learner in learners)


U = 2.0**-24  # float32's unit round-off


def test_one_exchange_leaves_both_learners_with_exactly_the_average(jobs):
    """Real processes on gloo, every learner its own initial weights, one step without a
    gradient: active and passive both hold (w_a + w_p) / 2, to float32 rounding of the three
    operations of w + (v - w) / 2."""
    [learners] = jobs["one-exchange"]
    assert_clean(learners)
    a, b = (torch.tensor(learner["initial"], dtype=torch.float64) for learner in learners)
    assert not torch.allclose(a, b)
    average = (a + b) / 2
    bound = 2 * U * (a.abs() + b.abs())
    for learner in learners:
        own = torch.tensor(learner["own"], dtype=torch.float64)
        assert ((own - average).abs() <= bound).all(), (own - average).abs().max()
    both = sum(torch.tensor(learner["own"], dtype=torch.float64) for learner in learners)
    assert ((both - (a + b)).abs() <= 2 * bound).all()  # the sum is kept


def test_delay_by_one_applies_the_average_one_step_late(jobs):
    """The active's weights after step 0 are its own (the exchange it started is still out),
    after step 1 they are exactly the average of step 0's exchange."""
    [learners] = jobs["one-exchange-delayed"]
    assert_clean(learners)
    active = learners[0]
    a, b = (torch.tensor(learner["initial"], dtype=torch.float64) for learner in learners)
    after = [torch.tensor(t, dtype=torch.float64) for t in active["trace"]]
    assert torch.equal(after[0], a)
    bound = 2 * U * (a.abs() + b.abs())
    assert ((after[1] - (a + b) / 2).abs() <= bound).all()
    assert active["exchanges"] == 2  # step 1's exchange was drained before the epoch-end average


@pytest.mark.parametrize("job", ["mixing", "mixing-random-ring-delayed"])
def test_pairwise_averaging_keeps_the_sum_and_pulls_the_learners_together(jobs, job):
    [learners] = jobs[job]
    assert_clean(learners)
    initial = torch.stack([torch.tensor(learner["initial"], dtype=torch.float64) for learner in learners])
    own = torch.stack([torch.tensor(learner["own"], dtype=torch.float64) for learner in learners])
    steps = 6
    bound = steps * 4 * U * initial.abs().sum(0)  # each exchange rounds each side a few times
    assert ((own.sum(0) - initial.sum(0)).abs() <= bound).all()
    spread = lambda w: (w - w.mean(0)).norm(dim=1).max()  # noqa: E731
    assert spread(own) < 0.5 * spread(initial)


@pytest.mark.parametrize(
    "job,per_node,topology",
    [
        ("16-ring", 1, "ring"),
        ("16-random-ring", 1, "random_ring"),
        ("16-exponential", 1, "exponential"),
        ("16-hadpsgd-4x4", 4, "ring"),
    ],
)
def test_sixteen_learners_claim_every_batch_once_average_and_shut_down_cleanly(jobs, job, per_node, topology):
    """16 forked learners on 2 cores, each from its own weights, steps that only average: an
    epoch of 96 batches claimed first come first served by the nodes (every learner of a node
    the same ones), an exchange per active node step, each passive serving what the actives
    sent, the learners' sum kept and their disagreement smaller at the end; a clean exit."""
    [learners] = jobs[job]
    assert_clean(learners)
    nodes = [learners[n * per_node : (n + 1) * per_node] for n in range(16 // per_node)]
    for node in nodes:
        assert all(learner["claimed"] == node[0]["claimed"] for learner in node)
    assert sorted(i for node in nodes for i in node[0]["claimed"]) == list(range(96))
    ring = Layout(0, 16, per_node, topology, 1).ring
    active = [ring.is_active(rank // per_node) for rank in range(16)]
    sent = [learner["exchanges"] for learner, a in zip(learners, active) if a]
    served = [learner["exchanges"] for learner, a in zip(learners, active) if not a]
    assert sent == [len(learner["claimed"]) for learner, a in zip(learners, active) if a]
    assert sum(sent) == sum(served) > 0
    initial = torch.stack([torch.tensor(learner["initial"], dtype=torch.float64) for learner in learners])
    own = torch.stack([torch.tensor(learner["own"], dtype=torch.float64) for learner in learners])
    assert ((own.sum(0) - initial.sum(0)).abs() <= sum(sent) * 4 * U * initial.abs().sum(0)).all()
    disagreement = lambda w: (w - w.mean(0)).pow(2).sum()  # noqa: E731  (pairwise averages only lower it)
    print(job, "disagreement after/before", float(disagreement(own) / disagreement(initial)))
    assert disagreement(own) < disagreement(initial)
