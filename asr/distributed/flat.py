"""A model's parameters (or gradients) as one flat vector, for collectives and exchanges.

One message per collective or exchange instead of one per tensor: fewer, larger messages
are what both gloo and NCCL move fastest.
"""

from __future__ import annotations

import copy
from typing import Sequence

import torch
from torch import Tensor


def numel(params: Sequence[Tensor]) -> int:
    return sum(p.numel() for p in params)


@torch.no_grad()
def flat_parameters(params: Sequence[Tensor]) -> Tensor:
    """A copy of the parameters as one vector (on their device)."""
    return torch.cat([p.detach().reshape(-1) for p in params])


def _same_device(params: Sequence[Tensor], flat: Tensor) -> None:
    """A flat vector must be on its parameters' device: a silent copy here would hide a
    missing (asynchronous) upload and block the GPU's main stream."""
    if params and flat.device != params[0].device:
        raise RuntimeError(
            f"the flat vector is on {flat.device}, the parameters on {params[0].device}; upload it first"
        )


@torch.no_grad()
def set_parameters_(params: Sequence[Tensor], flat: Tensor) -> None:
    _same_device(params, flat)
    offset = 0
    for p in params:
        n = p.numel()
        p.copy_(flat[offset : offset + n].view_as(p))
        offset += n


def averaged_model(model: torch.nn.Module, weights: Tensor) -> torch.nn.Module:
    """A copy of `model` holding the flat `weights` (the learners' average, evaluated while
    the learners go on from their own weights)."""
    out = copy.deepcopy(model)
    set_parameters_(list(out.parameters()), weights)
    return out


@torch.no_grad()
def add_to_parameters_(params: Sequence[Tensor], flat: Tensor) -> None:
    _same_device(params, flat)
    offset = 0
    for p in params:
        n = p.numel()
        p.add_(flat[offset : offset + n].view_as(p).to(p.dtype))
        offset += n
