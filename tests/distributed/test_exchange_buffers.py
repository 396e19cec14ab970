"""The exchange's buffers are made once: after its first steps, no ADPSGD step hands the network
or the fold a tensor it has not used before (the real AdpsgdUpdater, active and passive, on an
in-memory wire that keeps every tensor it was given, so a freed buffer's address cannot come
back as a "new" one), and the arithmetic is still the average."""

from __future__ import annotations

import pytest
import torch

import asr.distributed.adpsgd as adpsgd
from asr.distributed.adpsgd import AdpsgdUpdater
from asr.distributed.flat import flat_parameters
from asr.distributed.hadpsgd import DecentralizedGroups
from asr.distributed.topology import Layout
from asr.optim.updater import build_updater
from tests.distributed.sim_problem import model, train_cfg
from tests.distributed.test_exchange import Endpoint, Wire


class KeepingEndpoint(Endpoint):
    """Records, per swap, the tensors sent and received into, and keeps them alive."""

    def __init__(self, wire: Wire, active: bool, seen: list):
        super().__init__(wire, active)
        self.seen = seen

    def swap(self, mine, theirs, peer, active):
        self.seen.append((mine, theirs))
        super().swap(mine, theirs, peer, active)


def two_learners(monkeypatch, delay_by_one: bool, device: torch.device = torch.device("cpu")):
    """An active (rank 0) and a passive (rank 1) updater on one wire, each from its own weights
    (on `device`); what each side's swaps and folds used is recorded."""
    wire = Wire()
    swaps: dict[int, list] = {0: [], 1: []}
    folds: dict[int, list] = {0: [], 1: []}
    building = []
    monkeypatch.setattr(
        adpsgd, "PointToPoint", lambda group: KeepingEndpoint(wire, building[-1] == 0, swaps[building[-1]])
    )
    real_add = adpsgd.add_to_parameters_

    def fold(params, delta):
        folds[0 if params is learners[0].params else 1].append(delta)
        real_add(params, delta)

    monkeypatch.setattr(adpsgd, "add_to_parameters_", fold)
    learners = []
    for rank in (0, 1):
        building.append(rank)
        net = model().to(device)
        with torch.no_grad():
            for p in net.parameters():
                p.add_(float(rank))  # different weights on the two learners
        learners.append(
            build_updater(
                net,
                train_cfg(),
                2,
                AdpsgdUpdater,
                layout=Layout(rank, 2, 1),
                groups=DecentralizedGroups(),
                timeout_s=10.0,
                device=device,
                delay_by_one=delay_by_one,
            )
        )
    return learners, swaps, folds


def average_only(active: AdpsgdUpdater, passive: AdpsgdUpdater, step: int) -> None:
    """One step of each learner that only averages (a zero loss: the optimizer step moves nothing)."""
    active.begin_step()
    active.step(active.model(torch.zeros(1, 6)).sum() * 0.0)
    with passive.lock:
        passive.lock.wait_for(lambda: passive.exchanges > step, timeout=10)
    passive.step(passive.model(torch.zeros(1, 6)).sum() * 0.0)


def pointers(tensors) -> set[int]:
    return {t.data_ptr() for t in tensors}


@pytest.mark.parametrize("delay_by_one", [False, True])
def test_no_step_after_the_first_two_uses_a_new_buffer(monkeypatch, delay_by_one):
    (active, passive), swaps, folds = two_learners(monkeypatch, delay_by_one)
    steps = 6
    for step in range(steps):
        average_only(active, passive, step)
    active.close()
    passive.close()
    assert len(swaps[0]) == len(swaps[1]) == steps
    assert len(folds[0]) == len(folds[1]) == steps  # (with delay_by_one the last one at close)
    for rank, buffers in ((0, 2), (1, 1)):  # the active alternates two slots, the passive has one
        first, later = swaps[rank][:2], swaps[rank][2:]
        for side in (0, 1):  # what is sent, what is received into
            assert pointers(t[side] for t in later) <= pointers(t[side] for t in first), f"learner {rank}: new buffer"
            assert len(pointers(t[side] for t in swaps[rank])) == buffers
        assert pointers(folds[rank][2:]) <= pointers(folds[rank][:2]), f"learner {rank} folds a new tensor"
        assert len(pointers(folds[rank])) == buffers


def test_one_exchange_with_the_buffers_is_still_exactly_the_average(monkeypatch):
    (active, passive), _, _ = two_learners(monkeypatch, delay_by_one=False)
    a, p = flat_parameters(active.params), flat_parameters(passive.params)
    average_only(active, passive, 0)
    active.close()
    passive.close()
    expected = a + (p - a) / 2  # what w + (v - w) / 2 rounds to, on both sides
    assert torch.equal(flat_parameters(active.params), expected)
    assert torch.equal(flat_parameters(passive.params), p + (a - p) / 2)
    assert passive.exchanger.pending.abs().max() == 0  # folded and cleared
