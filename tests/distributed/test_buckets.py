"""distributed.bucket_cap_mb: the `auto` rule (a quarter of the gradients, within [1, 25] MB),
how the config spells it, and that DistributedDataParallel gets the size the rule chose."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from asr.config import load_config
from asr.distributed.build import build_training_updater
from asr.distributed.config import bucket_size
from asr.distributed.context import DistributedContext
from asr.distributed.ssgd import bucket_cap_mb, gradient_megabytes
from asr.utils.errors import InputError
from tests.distributed.sim_problem import train_cfg

MB = 2**20


def linear_stack(layers: int, megabytes_each: float, device: str = "meta") -> torch.nn.Sequential:
    """`layers` square float32 layers (no bias) of about `megabytes_each` MB of weights each."""
    side = int((megabytes_each * MB / 4) ** 0.5)
    return torch.nn.Sequential(*(torch.nn.Linear(side, side, bias=False, device=device) for _ in range(layers)))


def test_auto_is_a_quarter_of_the_gradients_within_1_and_25_mb():
    model = linear_stack(8, 1.0)
    assert gradient_megabytes(model) == pytest.approx(8.0, rel=1e-2)
    assert bucket_cap_mb("auto", model) == pytest.approx(gradient_megabytes(model) / 4)
    assert bucket_cap_mb("auto", linear_stack(2, 1.0)) == 1.0  # small models: DDP's smallest sensible bucket
    assert bucket_cap_mb("auto", linear_stack(4, 100.0)) == 25.0  # large ones: torch's default


def test_frozen_parameters_send_no_gradients():
    model = linear_stack(8, 1.0)
    for layer in list(model)[4:]:
        layer.weight.requires_grad_(False)
    assert gradient_megabytes(model) == pytest.approx(4.0, rel=1e-2)


def test_a_number_is_taken_as_it_is():
    model = linear_stack(8, 1.0)
    assert bucket_cap_mb(25.0, model) == 25.0
    assert bucket_cap_mb("12.5", model) == 12.5  # as a str field would hold it


def test_the_config_defaults_to_auto_and_takes_a_number():
    assert load_config(["distributed=ssgd"]).distributed.bucket_cap_mb == "auto"
    assert float(load_config(["distributed=ssgd", "distributed.bucket_cap_mb=8"]).distributed.bucket_cap_mb) == 8.0
    with pytest.raises(InputError, match="bucket_cap_mb"):
        load_config(["distributed=ssgd", "distributed.bucket_cap_mb=big"])
    assert bucket_size("auto") is None and bucket_size(0.5) is None
    assert bucket_size(0) and bucket_size("-1") and bucket_size("big")


@pytest.fixture
def one_process_group():
    """A gloo group of this process alone: DDP needs one to be built, not a second learner."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def ddp_buckets(setting) -> tuple[int, list[int]]:
    """(bucket size DDP was given, in bytes; the sizes of the buckets it made) for an 8 MB
    model under SSGD."""
    model = linear_stack(8, 1.0, device="cpu")
    cfg = load_config(["distributed=ssgd", f"distributed.bucket_cap_mb={setting}"])
    # Two learners as far as the updater knows; the one-process group is all DDP talks to.
    ctx = DistributedContext(algorithm="ssgd", rank=0, world_size=2, backend="gloo")
    updater = build_training_updater(model, SimpleNamespace(train=train_cfg(), distributed=cfg.distributed), ctx)
    ddp = updater.wrap(model)
    for _ in range(2):  # DDP starts with one bucket and cuts them after the first backward pass
        ddp(torch.randn(2, model[0].in_features)).sum().backward()
    buckets = [b.buffer().numel() * b.buffer().element_size() for b in ddp.reducer._get_zeros_like_grad_buckets()]
    return ddp.bucket_bytes_cap, buckets


def test_ddp_gets_the_auto_bucket_size_and_cuts_several_buckets(one_process_group):
    cap, buckets = ddp_buckets("auto")
    assert cap == int(bucket_cap_mb("auto", linear_stack(8, 1.0)) * MB)
    assert sum(buckets) == 8 * 512 * 512 * 4 and len(buckets) >= 4  # the first all-reduced during backward
    cap, buckets = ddp_buckets(25)
    assert cap == 25 * MB and len(buckets) == 1  # torch's default: one all-reduce after backward
