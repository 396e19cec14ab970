"""What a GPU run would trip over, caught on the CPU: tensors of one operation on two devices.

No GPU is lent to this project. The "meta" device stands in for a second device: its tensors
have no data, but torch checks devices on them as it would for CUDA, so an operation that mixes
a CPU tensor with a parameter's (Adam's step counter with the moments, a host-side averaging
delta added to device weights without an upload) fails here as it would on a GPU.
"""

from __future__ import annotations

import pytest
import torch

from asr.distributed.flat import add_to_parameters_, flat_parameters, set_parameters_
from asr.distributed.staging import Staging, _flat_slice
from asr.optim.updater import optimizer_moments

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
    uploaded, event = staging.upload(host)
    assert event is None and staging.ready_on_main(uploaded, event) is uploaded
