"""The GPU ordering of ADPSGD's weight snapshots and updates, driven on the CPU through a fake
of the staging's streams (fake_streams.py) that logs every operation per stream.

The real AdpsgdUpdater runs a few steps against a partner on an in-memory wire; the test logs
the main stream's own work (the batch's copy, forward, backward) and every weight write
(optimizer step, fold) from outside the updater, then asks the fake whether a GPU would have:
read the weights for a snapshot before a later update changed them, seen every earlier update,
and started the snapshot without waiting for forward and backward work queued since.
"""

from __future__ import annotations

import torch

import asr.distributed.adpsgd as adpsgd
from asr.distributed.adpsgd import AdpsgdUpdater
from asr.distributed.exchange import ActiveExchanger
from asr.distributed.hadpsgd import DecentralizedGroups
from asr.distributed.staging import Staging
from asr.distributed.topology import Layout
from asr.optim.updater import build_updater
from tests.distributed.fake_streams import MAIN, FakeStreams
from tests.distributed.sim_problem import batches, model, train_cfg
from tests.distributed.test_exchange import CPU, Wire, passive_server


def fake_gpu_updater(
    monkeypatch, rank: int, wire: Wire, delay_by_one: bool = False
) -> tuple[AdpsgdUpdater, FakeStreams]:
    """Learner `rank` of two (0 active, 1 passive) on `wire`, its staging on fake streams, its
    weight writes logged on the fake main stream."""
    streams = FakeStreams()
    monkeypatch.setattr(adpsgd, "Staging", lambda device: Staging(device, streams))
    monkeypatch.setattr(adpsgd, "PointToPoint", lambda group: wire.endpoint(active=rank == 0))
    real_add = adpsgd.add_to_parameters_

    def fold(params, delta):
        streams.kernel(MAIN, "fold")
        real_add(params, delta)

    monkeypatch.setattr(adpsgd, "add_to_parameters_", fold)
    updater = build_updater(
        model(),
        train_cfg(),
        2,
        AdpsgdUpdater,
        layout=Layout(rank, 2, 1),
        groups=DecentralizedGroups(),
        timeout_s=10.0,
        device=torch.device("cpu"),
        delay_by_one=delay_by_one,
    )
    step = updater.optimizer.step

    def logged_step(*args, **kwargs):
        streams.kernel(MAIN, "optimizer.step")
        return step(*args, **kwargs)

    updater.optimizer.step = logged_step
    return updater, streams


def train_step(updater: AdpsgdUpdater, streams: FakeStreams, batch, between=None) -> None:
    """One step as asr.train's loop issues it; `between` runs after forward and backward are queued."""
    x, y = batch
    streams.kernel(MAIN, "batch to device")
    updater.begin_step()
    streams.kernel(MAIN, "forward")
    loss = (updater.model(x) - y).pow(2).mean()
    streams.kernel(MAIN, "backward")
    if between is not None:
        between()
    updater.step(loss, weight=x.shape[0])


def test_an_active_learners_updates_wait_for_its_snapshots_also_with_nothing_to_mix(monkeypatch):
    """delay_by_one: the first step and the step after a drain have nothing to mix, and their
    optimizer step must still wait for the side stream's read of the step's snapshot."""
    wire = Wire()
    # The updater first: its build can outlast the 10 s the wire's server waits for a message.
    updater, streams = fake_gpu_updater(monkeypatch, 0, wire, delay_by_one=True)
    server = passive_server(wire, [torch.zeros(sum(p.numel() for p in model().parameters()))])
    data = batches(4, 8)
    train_step(updater, streams, data[0])
    train_step(updater, streams, data[1])
    updater.drain()  # as before a node checkpoint
    train_step(updater, streams, data[2])
    train_step(updater, streams, data[3])
    updater.close()
    server.close()
    assert updater.exchanges == 4
    assert sum(op.what.startswith("snapshot") for op in streams.ops) == 4
    assert streams.hazards() == [], streams.report()


def test_a_passive_learners_snapshot_waits_for_its_last_update_not_its_queued_compute(monkeypatch):
    """The server snapshots while forward and backward are queued: the copy must wait only for
    the last weight update, and the fold and optimizer step must wait for the copy."""
    wire = Wire()
    updater, streams = fake_gpu_updater(monkeypatch, 1, wire)
    active = ActiveExchanger(0, lambda step: 1, [1], wire.endpoint(active=True), CPU, 10.0)
    size = updater.size

    def exchange_meanwhile(step: int):
        def run():
            active.start(step, torch.ones(size), None)
            active.finish(step)  # returns once the passive's server has answered

        return run

    for step, batch in enumerate(batches(3, 8)):
        train_step(updater, streams, batch, between=exchange_meanwhile(step))
    active.close(3)
    updater.close()
    assert updater.exchanges == 3
    assert sum(op.what.startswith("snapshot") for op in streams.ops) == 3
    assert sum(op.what == "fold" for op in streams.ops) == 3
    assert streams.hazards() == [], streams.report()
    # The pending average is updated by the server on the side stream, folded (and cleared) on
    # the main stream: each fold sees every update issued before it, and each update waits for
    # the fold issued before it.
    assert sum(op.what == "pending += average" for op in streams.ops) == 3
    assert streams.order_hazards(("fold",), ("pending += average",)) == [], streams.report()


def test_a_passives_fold_while_its_server_swaps_comes_before_the_servers_update(monkeypatch):
    """The passive folds (and clears) its pending average while the server is in the swap: the
    server's update of the pending average, issued after, must wait for that fold."""
    wire = Wire()
    wire.gate.clear()  # the passive's swap waits until released
    updater, streams = fake_gpu_updater(monkeypatch, 1, wire)
    active = ActiveExchanger(0, lambda step: 1, [1], wire.endpoint(active=True), CPU, 10.0)
    warm, first, second = batches(3, 8)
    train_step(updater, streams, warm)  # a first step, slow to start, before the active's swap waits
    active.start(0, torch.ones(updater.size), None)
    assert wire.in_swap.wait(10)
    train_step(updater, streams, first)  # folds what is pending (nothing yet) mid-exchange
    wire.gate.set()
    active.finish(0)
    train_step(updater, streams, second)  # folds the exchange's average
    active.close(1)
    updater.close()
    assert [op.what for op in streams.ops].count("pending += average") == 1
    assert streams.order_hazards(("fold",), ("pending += average",)) == [], streams.report()
    assert streams.hazards() == [], streams.report()
