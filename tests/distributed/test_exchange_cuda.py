"""On a GPU (skipped without one): the exchange's side stream, pinned host buffers and events
(asr/distributed/staging.py) give the weights a CPU run gives, with buffers made once. The real
updaters, an active and a passive, on an in-memory wire (tests/distributed/test_exchange_buffers.py)."""

from __future__ import annotations

import pytest
import torch

from asr.distributed.flat import flat_parameters
from tests.distributed.sim_problem import batches
from tests.distributed.test_exchange_buffers import pointers, two_learners

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def train(monkeypatch, device: torch.device, delay_by_one: bool, steps: int = 6):
    """`steps` gradient steps of both learners on the same batches; their weights and swaps."""
    with monkeypatch.context() as patch:
        (active, passive), swaps, folds = two_learners(patch, delay_by_one, device)
        for step, (x, y) in enumerate(batches(steps, 8)):
            x, y = x.to(device), y.to(device)
            active.begin_step()
            active.step((active.model(x) - y).pow(2).mean(), weight=8)
            with passive.lock:
                assert passive.lock.wait_for(lambda: passive.exchanges > step, timeout=30)
            passive.step((passive.model(x) - y).pow(2).mean(), weight=8)
        active.close()
        passive.close()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return [flat_parameters(u.params).cpu() for u in (active, passive)], swaps, folds


@pytest.mark.parametrize("delay_by_one", [False, True])
def test_a_gpu_run_gives_the_cpus_weights_with_buffers_made_once(monkeypatch, delay_by_one):
    on_cpu, _, _ = train(monkeypatch, torch.device("cpu"), delay_by_one)
    on_gpu, swaps, folds = train(monkeypatch, torch.device("cuda"), delay_by_one)
    for cpu, gpu in zip(on_cpu, on_gpu):
        torch.testing.assert_close(gpu, cpu, rtol=1e-4, atol=1e-5)
    assert all(t.is_pinned() for rank in (0, 1) for pair in swaps[rank] for t in pair)
    for rank, buffers in ((0, 2), (1, 1)):
        assert len(pointers(t[0] for t in swaps[rank])) == len(pointers(t[1] for t in swaps[rank])) == buffers
        assert len(pointers(folds[rank])) == buffers and all(t.is_cuda for t in folds[rank])
