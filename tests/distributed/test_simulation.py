"""Virtual learners in lockstep: SSGD equals one learner with the union batch; ADPSGD's pairwise
averages keep the mean and the learners close; H-ADPSGD's degenerate cases are ADPSGD and SSGD;
the epoch end averages for evaluation only."""

import math

import pytest
import torch

from asr.distributed.flat import flat_parameters
from tests.distributed.lockstep import Simulation
from asr.optim.updater import build_updater
from tests.distributed.sim_problem import batches, loss_fn, model, split, train_cfg

torch.set_num_threads(1)


def run(algorithm, learners, data, per_node=1, **cfg):
    sim = Simulation(model(), train_cfg(**cfg), algorithm, learners, per_node)
    for batch in data:
        sim.step(split(batch, learners), loss_fn)
    return sim


def weights(sim):
    return [flat_parameters(list(m.parameters())) for m in sim.models]


@pytest.mark.parametrize("optimizer,nesterov", [("sgd", False), ("sgd", True), ("adam", False)])
def test_ssgd_learners_equal_one_learner_with_the_union_batch(optimizer, nesterov):
    data = batches(25, 32)
    sim = run("ssgd", 4, data, optimizer=optimizer, nesterov=nesterov)
    single = model()
    updater = build_updater(single, train_cfg(optimizer=optimizer, nesterov=nesterov))
    for x, y in data:
        updater.step((single(x) - y).pow(2).sum() / len(x), weight=len(x))
    [node] = sim.models  # one node: the learners hold one model
    torch.testing.assert_close(
        flat_parameters(list(node.parameters())), flat_parameters(list(single.parameters())), rtol=1e-5, atol=1e-6
    )


def test_hadpsgd_degenerates_to_adpsgd_and_to_ssgd_exactly():
    data = batches(12, 16)
    for a, b in zip(weights(run("hadpsgd", 4, data, per_node=1)), weights(run("adpsgd", 4, data))):
        assert torch.equal(a, b)
    for a, b in zip(weights(run("hadpsgd", 4, data, per_node=4)), weights(run("ssgd", 4, data))):
        assert torch.equal(a, b)


@pytest.mark.parametrize("learners,per_node", [(4, 1), (5, 1), (8, 2)])
def test_pairwise_averaging_keeps_the_mean_and_averages_each_pair(learners, per_node):
    sim = Simulation(model(), train_cfg(), "hadpsgd" if per_node > 1 else "adpsgd", learners, per_node)
    gen = torch.Generator().manual_seed(9)
    for node in sim.nodes:  # different weights per node
        torch.nn.utils.vector_to_parameters(torch.randn(node.pending.numel(), generator=gen), node.params)
    before = torch.stack([n.snapshot() for n in sim.nodes])
    for node, delta in zip(sim.nodes, sim.mix()):
        if delta is not None:
            node.add(delta)
    after = torch.stack([n.snapshot() for n in sim.nodes])
    torch.testing.assert_close(after.mean(0), before.mean(0))
    if sim.layout.num_nodes % 2 == 0:  # a perfect matching: every node averaged with exactly one other
        for a, p in sim.layout.ring.pairs(0):
            torch.testing.assert_close(after[a], (before[a] + before[p]) / 2)
            torch.testing.assert_close(after[p], after[a])


def test_adpsgd_learners_stay_close_and_learn_like_ssgd():
    data = batches(60, 64)
    held_out = batches(1, 256, seed=99)
    ssgd, adpsgd = run("ssgd", 8, data), run("adpsgd", 8, data)
    before = weights(adpsgd)
    average, spread = adpsgd.end_epoch()
    assert all(torch.equal(a, b) for a, b in zip(weights(adpsgd), before))  # the average is for evaluation only
    torch.testing.assert_close(average, torch.stack(before).mean(0))
    assert spread < 0.05  # max |w_i - mean| / |mean| after 60 steps without a global average
    losses = {}
    for name, m in (("ssgd", ssgd.models[0]), ("adpsgd", model())):
        if name == "adpsgd":
            torch.nn.utils.vector_to_parameters(average, m.parameters())
        loss, count = loss_fn(m, held_out)
        losses[name] = float(loss.detach()) / count
    first, _ = loss_fn(model(), held_out)
    assert losses["adpsgd"] < 0.2 * float(first.detach()) / 256  # it learned
    assert losses["adpsgd"] < 1.5 * losses["ssgd"] + 0.05


def test_non_finite_loss_all_skip_under_ssgd_only_that_node_under_adpsgd():
    data = batches(3, 16)

    def poisoned(m, shards):
        loss, count = loss_fn(m, shards)
        return (loss * math.nan if m is poisoned.victim else loss), count

    for algorithm in ("ssgd", "adpsgd"):
        sim = Simulation(model(), train_cfg(momentum=0.0, warmup_steps=0), algorithm, 4)
        for batch in data[:2]:
            sim.step(split(batch, 4), loss_fn)
        before = weights(sim)
        poisoned.victim = sim.models[-1] if algorithm == "ssgd" else sim.models[1]
        sim.step(split(data[2], 4), poisoned)
        after = weights(sim)
        if algorithm == "ssgd":
            assert sim.skipped == 1 and torch.equal(after[0], before[0])
        else:
            assert sim.skipped == 1
            # Learner 1 (passive; step 2 pairs it with learner 2) still averaged, without its gradient.
            torch.testing.assert_close(after[1], (before[1] + before[2]) / 2)
