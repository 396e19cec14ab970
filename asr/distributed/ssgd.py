"""Synchronous SGD on DistributedDataParallel: bucketed gradient all-reduces during backward.

Each learner's loss is a mean over its own units (CTC: target tokens; CE: frames), so the
gradients are combined weighted by those counts:

    g = sum_r n_r g_r / sum_r n_r

which is exactly the gradient of the loss of the union batch. DDP averages the learners'
gradients (divides their sum by N), so before the backward pass the learners all-reduce their
counts (a few bytes) and each scales its loss by N n_r / sum n. The counts are reduced where
the gradients are: on the learner's GPU over NCCL (a device tensor on the `cpu:gloo,cuda:nccl`
group), on the CPU over gloo (`reduction_device`). With the sharded sampler
(asr.train.data.BucketBatchSampler), N learners with batch B therefore train exactly like one
learner with batch N x B, up to float rounding.

A learner whose batch gave a non-finite loss says so in the same small all-reduce, and then no
learner runs its backward pass: they skip the same update together (DDP needs every learner in
every gradient all-reduce), which is what one learner with the union batch would do.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from asr.distributed.context import collective
from asr.optim.updater import Updater


# distributed.bucket_cap_mb=auto: a quarter of the model's gradient bytes, within these bounds
# (MB as DDP counts them, 2**20 bytes). DDP closes a bucket once it holds at least the cap and
# never splits a tensor, so a model of 4 MB or more gets about four buckets (plus DDP's small
# first one): the all-reduce of the buckets filled first overlaps the backward pass of the rest,
# where one bucket (torch's 25 MB default on a model under 25 MB) can only start after it.
AUTO_BUCKET_SHARE = 4
AUTO_BUCKET_MIN_MB = 1.0
AUTO_BUCKET_MAX_MB = 25.0

# Every process group a DDP model reduces over, referenced until the process ends. DDP's Reducer
# holds its group and is freed with the GIL held: as the group's last owner it would run
# ~ProcessGroupGloo, which waits, GIL in hand, for the group's worker threads, while one of them,
# freeing a collective whose tensors Python has dropped, waits for the GIL (pytorch/pytorch#56297):
# a learner exiting right after a collective hangs. The Python object kept here is the last owner
# instead, and it releases the GIL before it destroys the group.
GROUPS_OF_DDP: list = []


def gradient_megabytes(model: torch.nn.Module) -> float:
    """What one all-reduce of the model's gradients moves, in MB (2**20 bytes)."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad) / 2**20


def bucket_cap_mb(setting: float | str, model: torch.nn.Module) -> float:
    """distributed.bucket_cap_mb as DDP takes it: `auto` by the rule above, a number as it is."""
    if setting != "auto":
        return float(setting)
    share = gradient_megabytes(model) / AUTO_BUCKET_SHARE
    return min(AUTO_BUCKET_MAX_MB, max(AUTO_BUCKET_MIN_MB, share))


def ddp_wrap(model: torch.nn.Module, device: torch.device, group, bucket_cap_mb: float) -> DistributedDataParallel:
    """DDP over `group` (None: all learners), with torch's default for buffers: the models have
    none, and a model with some would get them from the group's first learner, as DDP users expect.
    The gradients are views of DDP's buckets, which saves a model-sized copy a step and its memory."""
    device_ids = [device.index] if device.type == "cuda" else None
    GROUPS_OF_DDP.append(dist.group.WORLD if group is None else group)
    return DistributedDataParallel(
        model, device_ids=device_ids, process_group=group, bucket_cap_mb=bucket_cap_mb, gradient_as_bucket_view=True
    )


def group_sums(local: torch.Tensor, group=None, device: torch.device | None = None) -> tuple[list[float], list[float]]:
    """(`local`, its sum over `group`), reduced on `device` (None: the CPU, so over that device's
    backend of the group) and read to the host together: one sync."""
    values = local.to(device=device or torch.device("cpu"), dtype=torch.float64)
    reduced = values.clone()
    dist.all_reduce(reduced, group=group)
    both = torch.cat([values, reduced]).tolist()
    return both[: len(values)], both[len(values) :]


def weighted_mean_factor(weight: float, total: float, unusable: float, learners: int) -> float | None:
    """The factor a learner's mean loss is scaled by so that DDP's mean of the gradients of
    `learners` learners is the count-weighted mean; None when any of them has no usable loss."""
    if unusable > 0 or total <= 0:
        return None
    return weight * learners / total


class SsgdUpdater(Updater):
    def __init__(
        self,
        model: torch.nn.Module,
        optimizer,
        schedule,
        grad_clip: float,
        *,
        rank: int,
        world_size: int,
        timeout_s: float,
        device: torch.device,
        bucket_cap_mb: float = 25.0,
        count_device: torch.device | None = None,
        scaler=None,
    ):
        super().__init__(model, optimizer, schedule, grad_clip, scaler=scaler)
        self.rank = rank
        self.world_size = world_size
        self.timeout_s = timeout_s
        self.device = device
        self.bucket_cap_mb = bucket_cap_mb
        self.count_device = count_device or torch.device("cpu")  # where the token counts are reduced

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return ddp_wrap(model, self.device, None, self.bucket_cap_mb)

    def count_sums(self, local: torch.Tensor) -> tuple[list[float], list[float]]:
        with collective("gradient all-reduce (token counts)", self.rank, self.timeout_s):
            return group_sums(local, None, self.count_device)

    def gradient_factor(self, weight: float, total: float, unusable: float) -> float | None:
        return weighted_mean_factor(weight, total, unusable, self.world_size)

    def backward(self, loss: torch.Tensor) -> None:
        with collective("gradient all-reduce", self.rank, self.timeout_s):
            super().backward(loss)

    def skip_batch(self) -> None:
        """This learner's batch gave a non-finite loss: still take part, so all skip together
        (the counts said so to every learner: none asks again)."""
        self.step(None, factor=None)
