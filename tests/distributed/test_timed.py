"""Virtual learners on a clock: with equal speeds it is exactly the lockstep simulator; a learner
twice as slow claims half the batches; delay-by-one applies each average one step late and
hides the exchange's time; averaging keeps the learners' sum whatever the timing."""

import pytest
import torch

from tests.distributed.lockstep import Simulation
from asr.distributed.timed import TimedSimulation, Timing
from tests.distributed.sim_problem import batches, loss_fn, model, split, train_cfg

torch.set_num_threads(1)
U = 2.0**-24  # float32's unit round-off


def plan(steps, learners, size=16, seed=1):
    return [split(batch, learners) for batch in batches(steps, size, seed)]


def zero_loss(m, shards):
    loss, count = loss_fn(m, shards)
    return loss * 0.0, count  # gradients of zero: only the averaging moves the weights


def own_start(sim, seed=9):
    """Every node its own weights."""
    gen = torch.Generator().manual_seed(seed)
    for node in sim.nodes:
        torch.nn.utils.vector_to_parameters(torch.randn(node.pending.numel(), generator=gen), node.params)


def snapshots(sim):
    return [n.snapshot() for n in sim.nodes]


@pytest.mark.parametrize(
    "algorithm,learners,per_node,topology",
    [
        ("adpsgd", 4, 1, "ring"),
        ("adpsgd", 5, 1, "ring"),
        ("adpsgd", 6, 1, "random_ring"),
        ("adpsgd", 8, 1, "exponential"),
        ("hadpsgd", 8, 2, "ring"),
        ("ssgd", 4, 1, "ring"),
    ],
)
def test_equal_speeds_and_no_delay_is_exactly_the_lockstep_simulator(algorithm, learners, per_node, topology):
    epochs = [plan(7, learners, seed=1), plan(7, learners, seed=2)]
    lockstep = Simulation(model(), train_cfg(nesterov=True), algorithm, learners, per_node, topology, seed=3)
    timed = TimedSimulation(model(), train_cfg(nesterov=True), algorithm, learners, per_node, topology, seed=3)
    for epoch in epochs:
        expected = [lockstep.step(batch, loss_fn) for batch in epoch]
        run = timed.train_epoch(epoch, loss_fn)
        assert run.loss == sum(e[0] for e in expected) and run.count == sum(e[1] for e in expected)
        assert run.steps == [len(epoch)] * timed.layout.num_nodes and run.time == len(epoch) and run.waited == 0
        (mean_a, spread_a), (mean_b, spread_b) = lockstep.end_epoch(), timed.end_epoch()
        assert torch.equal(mean_a, mean_b) and spread_a == spread_b
        for a, b in zip(snapshots(lockstep), snapshots(timed)):
            assert torch.equal(a, b)


@pytest.mark.parametrize("slow", [0, 1, 3])
def test_a_learner_twice_as_slow_takes_half_the_steps(slow):
    """4 ADPSGD learners, one at half speed: per 2 units of time the others take 2 batches each
    and it takes 1, so of 28 batches it claims 4 and the others 8 each, active or passive."""
    speeds = tuple(0.5 if i == slow else 1.0 for i in range(4))
    sim = TimedSimulation(model(), train_cfg(), "adpsgd", 4, timing=Timing(speeds))
    run = sim.train_epoch(plan(7, 4), loss_fn)
    assert run.steps == [4 if i == slow else 8 for i in range(4)]
    assert run.time == 8


def test_ssgd_waits_for_its_slowest_learner():
    sim = TimedSimulation(model(), train_cfg(), "ssgd", 4, timing=Timing((1.0, 1.0, 0.5, 1.0)))
    run = sim.train_epoch(plan(7, 4), loss_fn)
    assert run.steps == [7] and run.time == 14


def test_delay_by_one_applies_each_average_exactly_one_step_late():
    """Two learners, gradients of zero. The passive's server answers with its weights at once;
    the active adds the delta of the exchange it started one step earlier (none at the first):
        d_k = (y_k - x_k) / 2,   y_{k+1} = y_k - d_k,   x_{k+1} = x_k + d_{k-1}
    (without the delay x_{k+1} = x_k + d_k: both hold the average after one step)."""
    for delay in (False, True):
        sim = TimedSimulation(model(), train_cfg(), "adpsgd", 2, delay_by_one=delay)
        own_start(sim)
        x, y = (w.double() for w in snapshots(sim))
        scale = x.abs() + y.abs()  # averages stay within it
        trace = []
        sim.train_epoch(
            plan(4, 2), zero_loss, observer=lambda node, step: trace.append((node, step, snapshots(sim)[node].double()))
        )
        previous = torch.zeros_like(x)
        for step in range(4):
            d = (y - x) / 2
            x, y, previous = x + (previous if delay else d), y - d, d
            [(_, _, active)] = [t for t in trace if t[:2] == (0, step + 1)]
            [(_, _, passive)] = [t for t in trace if t[:2] == (1, step + 1)]
            bound = 4 * (step + 1) * U * scale
            assert ((active - x).abs() <= bound).all() and ((passive - y).abs() <= bound).all(), (delay, step)
        if delay:  # the epoch end applies the last exchange still held back
            x = x + previous
        after = [w.double() for w in snapshots(sim)]
        assert ((after[0] - x).abs() <= 20 * U * scale).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_delay_by_one_hides_the_exchange_behind_a_whole_step(seed):
    """Steps of 0.7-1.3 (jitter 0.3), an exchange of 0.9: without the delay the active waits
    whenever its step is shorter than the exchange; with it the exchange has two steps to land.
    (A swap occupies the passive's server, so the delay hides its latency, never a lack of
    bandwidth: exchanges longer than every step would queue either way.)"""
    waited = {}
    for delay in (False, True):
        timing = Timing(jitter=0.3, exchange_time=0.9, seed=seed)
        sim = TimedSimulation(model(), train_cfg(), "adpsgd", 2, delay_by_one=delay, timing=timing)
        waited[delay] = sim.train_epoch(plan(20, 2), loss_fn).waited
    assert waited[False] > 0 and waited[True] == 0


@pytest.mark.parametrize(
    "algorithm,per_node,topology,delay",
    [
        ("adpsgd", 1, "ring", False),
        ("adpsgd", 1, "random_ring", True),
        ("adpsgd", 1, "ring", True),
        ("hadpsgd", 2, "random_ring", False),
        ("adpsgd", 1, "exponential", True),
    ],
)
def test_averaging_keeps_the_sum_whatever_the_timing(algorithm, per_node, topology, delay):
    """Drawn speeds, jitter, exchanges slower than some steps: pairwise averages move weight
    between learners and never create or lose any; the epoch end drains every delta."""
    timing = Timing.drawn(8, spread=0.4, jitter=0.3, exchange_time=0.7, seed=5)
    sim = TimedSimulation(model(), train_cfg(), algorithm, 8, per_node, topology, delay, timing, seed=4)
    own_start(sim)
    before = torch.stack(snapshots(sim)).double()
    run = sim.train_epoch(plan(12, 8), zero_loss)
    after = torch.stack(snapshots(sim)).double()
    assert sum(run.steps) == 12 * sim.layout.num_nodes and len(set(run.steps)) > 1  # unequal speeds, unequal steps
    bound = sum(run.steps) * 4 * U * before.abs().sum(0)
    assert ((after.sum(0) - before.sum(0)).abs() <= bound).all()
    spread = lambda w: (w - w.mean(0)).norm(dim=1).max()  # noqa: E731
    assert spread(after) < 0.5 * spread(before)
    assert all(n.pending.abs().max() == 0 for n in sim.nodes)


def test_the_same_seed_gives_the_same_run():
    def final(seed):
        timing = Timing.drawn(4, spread=0.3, jitter=0.2, exchange_time=0.5, seed=seed)
        sim = TimedSimulation(
            model(), train_cfg(), "adpsgd", 4, topology="random_ring", delay_by_one=True, timing=timing, seed=seed
        )
        run = sim.train_epoch(plan(9, 4), loss_fn)
        return run.steps, torch.cat(snapshots(sim))

    (steps_a, a), (steps_b, b), (_, c) = final(1), final(1), final(2)
    assert steps_a == steps_b and torch.equal(a, b) and not torch.equal(a, c)
