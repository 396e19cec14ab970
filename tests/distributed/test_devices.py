"""What a GPU run would trip over, caught on the CPU: tensors of one operation on two devices.

No GPU is lent to this project. The "meta" device stands in for a second device: its tensors
have no data, but torch checks devices on them as it would for CUDA, so an operation that mixes
a CPU tensor with a parameter's (Adam's step counter with the moments, a host-side averaging
delta added to device weights without an upload) fails here as it would on a GPU.
"""

from __future__ import annotations

import pytest
import torch

import asr.distributed.adpsgd as adpsgd
import asr.distributed.ssgd as ssgd
from asr.distributed.adpsgd import AdpsgdUpdater
from asr.distributed.context import DistributedContext, reduction_device
from asr.distributed.exchange import GOODBYE, header
from asr.distributed.flat import add_to_parameters_, flat_parameters, set_parameters_
from asr.distributed.hadpsgd import DecentralizedGroups
from asr.distributed.staging import Staging, _flat_slice
from asr.distributed.topology import Layout
from asr.optim.updater import build_updater, optimizer_moments
from tests.distributed.fake_streams import FakeStreams
from tests.distributed.sim_problem import train_cfg
from tests.distributed.test_exchange import Wire

META = torch.device("meta")


def meta_adam() -> tuple[list[torch.nn.Parameter], torch.optim.Adam]:
    params = [torch.nn.Parameter(torch.empty(3, 2, device=META)), torch.nn.Parameter(torch.empty(4, device=META))]
    optimizer = torch.optim.Adam(params)
    for p in params:  # Adam's state as it is after a step: step on the CPU, moments on the device
        optimizer.state[p] = {
            "step": torch.tensor(1.0),
            "exp_avg": torch.empty_like(p),
            "exp_avg_sq": torch.empty_like(p),
        }
    return params, optimizer


def test_optimizer_moments_leave_out_adams_step_counter():
    params, optimizer = meta_adam()
    moments = optimizer_moments(optimizer)
    assert len(moments) == 4 and all(t.device == META for t in moments)
    flat_parameters(moments)  # concatenating them would fail if the CPU step counter were among them
    with pytest.raises((RuntimeError, NotImplementedError)):
        flat_parameters([optimizer.state[params[0]]["step"].reshape(1), *moments])


def test_adding_a_host_delta_to_device_weights_needs_an_upload():
    params, _ = meta_adam()
    with pytest.raises(RuntimeError, match="on cpu, the parameters on meta"):
        add_to_parameters_(params, torch.zeros(10))
    with pytest.raises(RuntimeError, match="on cpu, the parameters on meta"):
        set_parameters_(params, torch.zeros(10))
    add_to_parameters_(params, torch.empty(10, device=META))  # the same device: fine


def test_staging_on_the_cpu_copies_the_slice_and_uploads_in_place():
    params = [torch.arange(6.0).reshape(2, 3), torch.arange(6.0, 10.0)]
    staging = Staging(torch.device("cpu"))
    host, event = staging.snapshot(params, 2, 8)
    assert event is None and host.tolist() == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    params[0].add_(100)  # the snapshot is a copy, not a view
    assert host.tolist() == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    assert _flat_slice(params, 0, 0).numel() == 0
    assert staging.ready_on_main(host, None) is host


class Stop(Exception):
    """Ends a collective the test only wanted to see issued (meta tensors hold no values)."""


def issued_reductions(monkeypatch) -> list[tuple[torch.device, object]]:
    seen = []

    def all_reduce(tensor, group=None, **kwargs):
        seen.append((tensor.device, group))
        raise Stop

    monkeypatch.setattr(ssgd.dist, "all_reduce", all_reduce)
    return seen


def test_token_counts_are_reduced_on_the_learners_device_over_its_backend(monkeypatch):
    """On a GPU the counts go where the gradients go (NCCL: a device tensor, SSGD on the
    default group, H-ADPSGD on the node group); on the CPU over gloo as before (H-ADPSGD: the
    node's control group). META stands in for the GPU."""
    seen = issued_reductions(monkeypatch)
    groups = DecentralizedGroups(node="node", node_control="node_control")
    for count_device, group in ((META, "node"), (torch.device("cpu"), "node_control")):
        model = torch.nn.Linear(2, 2)
        hadpsgd = build_updater(
            model,
            train_cfg(),
            2,
            AdpsgdUpdater,
            layout=Layout(0, 2, 2),
            groups=groups,
            timeout_s=5.0,
            device=torch.device("cpu"),
            count_device=count_device,
        )
        ssgd_updater = build_updater(
            model,
            train_cfg(),
            2,
            ssgd.SsgdUpdater,
            rank=0,
            world_size=2,
            timeout_s=5.0,
            device=torch.device("cpu"),
            count_device=count_device,
        )
        for updater in (hadpsgd, ssgd_updater):
            with pytest.raises(Stop):
                updater.gradient_weight(12.0, True)
        assert seen[-2:] == [(count_device, group), (count_device, None)]


@pytest.mark.parametrize(
    "device, backend, expected",
    [
        (torch.device("cuda", 1), "cpu:gloo,cuda:nccl", torch.device("cuda", 1)),
        (torch.device("cuda", 1), "gloo", torch.device("cpu")),  # distributed.backend=gloo on GPUs
        (torch.device("cpu"), "gloo", torch.device("cpu")),
    ],
)
def test_the_reduction_device_is_the_gpu_when_nccl_serves_it(device, backend, expected):
    assert reduction_device(DistributedContext(world_size=2, device=device, backend=backend)) == expected


def test_a_passives_pending_average_reaches_the_learners_device_before_the_fold(monkeypatch):
    """The server keeps its pending average on the learner's device, where the average is
    computed and folded in place (no upload, no copy); only what crosses the network is on the
    host (fake streams stand in for CUDA's, META for the GPU)."""
    wire = Wire()
    monkeypatch.setattr(adpsgd, "Staging", lambda device: Staging(device, FakeStreams()))
    monkeypatch.setattr(adpsgd, "PointToPoint", lambda group: wire.endpoint(active=False))
    model = torch.nn.Linear(3, 2, device=META)
    updater = build_updater(
        model,
        train_cfg(),
        2,
        AdpsgdUpdater,
        layout=Layout(1, 2, 1),
        groups=DecentralizedGroups(),
        timeout_s=5.0,
        device=META,
    )
    updater.exchanger.pending.fill_(0.5)
    slot = updater.exchanger.slot
    assert slot.out.device == slot.into.device == torch.device("cpu") and slot.out_dev.device == META
    mix = updater.prepare_mix()
    assert mix.delta is updater.exchanger.pending and mix.delta.device == META
    with updater.weights_lock():
        updater.apply_mix(mix)
    wire.headers.put(header(0, 0, GOODBYE))
    updater.close()
