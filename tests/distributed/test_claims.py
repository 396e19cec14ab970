"""First-come batch claims on a store: every batch of a plan exactly once, a faster node takes
more, a run's limit stops every node at the same point."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch.distributed as dist

from asr.distributed.claims import BatchClaims
from asr.train.data import BucketBatchSampler, ClaimedBatchSampler, Prefetcher


def claimer(store, limit: int = 0) -> BatchClaims:
    return BatchClaims(store, is_leader=True, leader=0, control_group=None, rank=0, timeout_s=10.0, limit=limit)


@pytest.mark.exclusive  # threads paced by sleeps race for batches: another test's load would skew the race
def test_two_nodes_claim_every_batch_once_and_the_faster_takes_more():
    store = dist.HashStore()
    lengths = list(np.random.default_rng(0).integers(50, 400, size=200))
    taken: dict[str, list[list[int]]] = {"fast": [], "slow": []}

    def node(name: str, seconds_per_batch: float) -> None:
        claims = claimer(store)
        claims.start_epoch(3)
        sampler = BucketBatchSampler(lengths, 1000, 8, seed=5)
        sampler.set_epoch(3)
        for batch in ClaimedBatchSampler(sampler, claims):
            taken[name].append(batch)
            time.sleep(seconds_per_batch)

    # 30x apart, so that a loaded machine's late wake-ups (a few ms) cannot bring the two within 2x.
    threads = [threading.Thread(target=node, args=("fast", 0.001)), threading.Thread(target=node, args=("slow", 0.03))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    plan = BucketBatchSampler(lengths, 1000, 8, seed=5).global_batches(3)
    got = sorted(sorted(b) for b in taken["fast"] + taken["slow"])
    assert got == sorted(sorted(b) for b in plan)  # each batch of the plan exactly once
    assert len(taken["fast"]) > 2 * len(taken["slow"]) > 0


def test_a_limit_stops_every_node_at_the_same_total():
    store = dist.HashStore()
    nodes = [claimer(store, limit=25), claimer(store, limit=25)]
    for c in nodes:
        c.start_epoch(0)
    got = []
    while True:
        indices = [c(plan_size=40) for c in nodes]
        got += [i for i in indices if i is not None]
        if all(i is None for i in indices):
            break
    assert sorted(got) == list(range(25)) and all(c.limit_reached for c in nodes)
    # The next epoch's counter starts afresh; the run's total carries over.
    for c in nodes:
        c.end_epoch(40)
        c.start_epoch(1)
    assert nodes[0](plan_size=40) is None  # 40 claimed in the run already, beyond the limit


def run_epochs(nodes: list[BatchClaims], plan: int, epochs: int, seed: int) -> tuple[list[int], list[set[bool]]]:
    """The nodes claim each epoch's plan in a random order until every one is told no more, as
    their leaders' threads would; returns the batches trained per epoch and, per epoch, the
    set of answers the nodes got to "did the run's limit end it"."""
    order = np.random.default_rng(seed)
    trained, verdicts = [], []
    for epoch in range(epochs):
        for c in nodes:
            c.start_epoch(epoch)
        open_nodes, count = list(nodes), 0
        while open_nodes:
            c = open_nodes[order.integers(len(open_nodes))]
            if c(plan_size=plan) is None:
                open_nodes.remove(c)
            else:
                count += 1
        trained.append(count)
        verdicts.append({c.limit_reached for c in nodes})
        if any(c.limit_reached for c in nodes):
            break
        for c in nodes:
            c.end_epoch(plan)
    return trained, verdicts


@pytest.mark.parametrize("nodes", [2, 3])
def test_every_node_agrees_whether_the_limit_ended_the_run_at_every_limit_around_the_plans_end(nodes):
    """max_steps from P-1 to P+K (K nodes): at the plan's end each node draws one index past it,
    K different ones; whether the run stopped must not depend on which a node drew."""
    plan = 10
    for limit in range(plan - 1, plan + nodes + 1):
        for seed in range(5):
            store = dist.HashStore()
            claims = [claimer(store, limit=limit) for _ in range(nodes)]
            trained, verdicts = run_epochs(claims, plan, epochs=3, seed=seed)
            assert all(len(v) == 1 for v in verdicts), (limit, seed, verdicts)
            assert sum(trained) == limit, (limit, seed, trained)
            # The limit inside a plan stops that epoch; at the plan's end the epoch ends as
            # planned and the next one stops before its first batch.
            assert trained[0] == min(plan, limit) and verdicts[-1] == {True}


def test_a_node_of_several_learners_shares_one_claim():
    """Each learner of a node takes its stride share of the node's batch."""
    sampler = BucketBatchSampler(list(range(10, 74)), 10_000, 4, seed=1, num_replicas=2, rank=1)
    sampler.set_epoch(0)
    claims = claimer(dist.HashStore())
    shards = list(ClaimedBatchSampler(sampler, claims))
    plan = sampler.global_batches(0)
    assert shards == [batch[1::2] for batch in plan]


def test_a_node_claims_one_batch_ahead_of_its_step():
    """What the trainer does under claims (Trainer.read_ahead): the batch being trained and the
    one read meanwhile are claimed, no more; the rest stays for faster nodes."""
    sampler = BucketBatchSampler(list(range(10, 74)), 100, 1, seed=1)
    sampler.set_epoch(0)
    claimed = ClaimedBatchSampler(sampler, claimer(dist.HashStore()))
    batches = Prefetcher(claimed, depth=1)
    for step in range(3):
        next(batches)
        deadline = time.monotonic() + 5
        while len(claimed.claimed) < step + 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.05)  # room for the thread to claim too many
        assert len(claimed.claimed) == step + 2
    batches.close()
