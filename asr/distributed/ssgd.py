"""Synchronous SGD: one all-reduce of the learners' gradients per step.

Each learner's loss is a mean over its own units (CTC: target tokens; CE: frames), so the
gradients are combined weighted by those counts:

    g = sum_r n_r g_r / sum_r n_r

which is exactly the gradient of the loss of the union batch. With the sharded sampler
(asr.train.data.BucketBatchSampler), N learners with batch B therefore train exactly like one
learner with batch N x B, up to float rounding.

A learner whose batch gave a non-finite loss contributes NaN, so every learner sees a
non-finite gradient and skips the same update: they agree without an extra message, and the
skip matches what one learner would do with the union batch.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.distributed as dist
from torch import Tensor

from asr.distributed.context import collective
from asr.distributed.flat import flat_gradients, set_gradients_
from asr.train.updater import Updater


def all_reduce_gradients(params: Sequence[Tensor], weight: float, usable: bool, group=None) -> None:
    """p.grad <- the weighted mean of the group's gradients (NaN if any learner's is unusable)."""
    flat = flat_gradients(params, weight, extra=1)
    flat[-1] = weight
    if not usable:
        flat[:-1] = math.nan
    dist.all_reduce(flat, group=group)
    total = flat[-1].item()
    grads = flat[:-1].div_(total) if total > 0 else flat[:-1].fill_(math.nan)
    set_gradients_(params, grads)


class SsgdUpdater(Updater):
    def __init__(self, model: torch.nn.Module, optimizer, schedule, grad_clip: float, rank: int, timeout_s: float, group=None):
        super().__init__(model, optimizer, schedule, grad_clip)
        self.params = list(model.parameters())
        self.group = group
        self.rank = rank
        self.timeout_s = timeout_s

    def synchronize_gradients(self) -> None:
        with collective("gradient all-reduce", self.rank, self.timeout_s):
            all_reduce_gradients(self.params, self.local_weight, self.local_usable, self.group)

    def skip_batch(self) -> None:
        """This learner's batch gave a non-finite loss: still take part, so all skip together."""
        self.step(None)
