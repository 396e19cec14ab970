"""Virtual learners: SSGD equals one learner with the union batch; ADPSGD's pairwise averages
keep the mean and the learners close; H-ADPSGD's degenerate cases are ADPSGD and SSGD."""

import math
from types import SimpleNamespace

import pytest
import torch

from asr.distributed.flat import flat_parameters
from asr.distributed.simulation import Simulation
from asr.optim.updater import build_updater

torch.set_num_threads(1)
TARGET = torch.randn(6, 2, generator=torch.Generator().manual_seed(3))


def train_cfg(**kw):
    base = dict(optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=0.0, warmup_steps=3, lr_decay=1.0, grad_clip=1.0,
                max_frames=1, lr_scaling="none", lr_reference_frames=0)
    return SimpleNamespace(**(base | kw))


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def batches(steps, size, seed=1):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        x = torch.randn(size, 6, generator=gen)
        out.append((x, x @ TARGET + 0.1 * torch.randn(size, 2, generator=gen)))
    return out


def loss_fn(m, batch):
    x, y = batch
    return (m(x) - y).pow(2).sum(), x.shape[0]


def split(batch, learners):
    x, y = batch
    return [(x[r::learners], y[r::learners]) for r in range(learners)]


def run(algorithm, learners, data, per_node=1, **cfg):
    sim = Simulation(model(), train_cfg(**cfg), algorithm, learners, per_node)
    for batch in data:
        sim.step(split(batch, learners), loss_fn)
    return sim


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_ssgd_learners_equal_one_learner_with_the_union_batch(optimizer):
    data = batches(25, 32)
    sim = run("ssgd", 4, data, optimizer=optimizer)
    single = model()
    updater = build_updater(single, train_cfg(optimizer=optimizer))
    for x, y in data:
        updater.step((single(x) - y).pow(2).sum() / len(x), weight=len(x))
    for learner in sim.models:
        torch.testing.assert_close(flat_parameters(list(learner.parameters())), flat_parameters(list(single.parameters())), rtol=1e-5, atol=1e-6)


def test_hadpsgd_degenerates_to_adpsgd_and_to_ssgd_exactly():
    data = batches(12, 16)

    def weights(sim):
        return [flat_parameters(list(m.parameters())) for m in sim.models]

    for a, b in zip(weights(run("hadpsgd", 4, data, per_node=1)), weights(run("adpsgd", 4, data))):
        assert torch.equal(a, b)
    for a, b in zip(weights(run("hadpsgd", 4, data, per_node=4)), weights(run("ssgd", 4, data))):
        assert torch.equal(a, b)


@pytest.mark.parametrize("learners,per_node", [(4, 1), (5, 1), (8, 2)])
def test_pairwise_averaging_keeps_the_mean_and_averages_each_pair(learners, per_node):
    sim = Simulation(model(), train_cfg(), "hadpsgd" if per_node > 1 else "adpsgd", learners, per_node)
    gen = torch.Generator().manual_seed(9)
    for node in sim.layout.nodes:  # different weights per node, equal inside a node
        values = torch.randn(sum(p.numel() for p in sim.params[0]), generator=gen)
        for i in node:
            torch.nn.utils.vector_to_parameters(values, sim.params[i])
    before = torch.stack([flat_parameters(p) for p in sim.params])
    sim.mix()
    after = torch.stack([flat_parameters(p) for p in sim.params])
    torch.testing.assert_close(after.mean(0), before.mean(0))
    leader = lambda n: sim.layout.nodes[n][0]  # noqa: E731
    if learners % 2 == 0:  # a perfect matching: every node averaged with exactly one other
        for a, p in sim.layout.ring.pairs(0):
            torch.testing.assert_close(after[leader(a)], (before[leader(a)] + before[leader(p)]) / 2)
            torch.testing.assert_close(after[leader(p)], after[leader(a)])


def test_adpsgd_learners_stay_close_and_learn_like_ssgd():
    data = batches(60, 64)
    held_out = batches(1, 256, seed=99)[0]
    ssgd, adpsgd = run("ssgd", 8, data), run("adpsgd", 8, data)
    spread = adpsgd.consensus()
    assert spread < 0.05  # max |w_i - mean| / |mean| after 60 steps without a global average
    losses = {}
    for name, sim in (("ssgd", ssgd), ("adpsgd", adpsgd)):
        loss, count = loss_fn(sim.models[0], held_out)
        losses[name] = float(loss.detach()) / count
    first, _ = loss_fn(model(), held_out)
    first = first.detach()
    assert losses["adpsgd"] < 0.2 * float(first) / 256  # it learned
    assert losses["adpsgd"] < 1.5 * losses["ssgd"] + 0.05


def test_non_finite_loss_all_skip_under_ssgd_only_that_learner_under_adpsgd():
    data = batches(3, 16)

    def poisoned(m, batch):
        loss, count = loss_fn(m, batch)
        return (loss * math.nan if m is poisoned.victim else loss), count

    for algorithm in ("ssgd", "adpsgd"):
        sim = Simulation(model(), train_cfg(momentum=0.0, warmup_steps=0), algorithm, 4)
        for batch in data[:2]:
            sim.step(split(batch, 4), loss_fn)
        before = [flat_parameters(p) for p in sim.params]
        poisoned.victim = sim.models[1]
        sim.step(split(data[2], 4), poisoned)
        after = [flat_parameters(p) for p in sim.params]
        if algorithm == "ssgd":
            assert sim.skipped == 4 and all(torch.equal(a, b) for a, b in zip(after, before))
        else:
            assert sim.skipped == 1
            # Learner 1 (passive; step 2 pairs it with learner 2) still averaged, without its gradient.
            torch.testing.assert_close(after[1], (before[1] + before[2]) / 2)
