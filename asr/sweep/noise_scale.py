"""The gradient noise scale: how large a batch can grow before a larger one buys few updates.

McCandlish et al. 2018 ("An empirical model of large-batch training", arXiv 1812.06162) define
B_noise = tr(Sigma) / |G|^2, with G the true gradient and Sigma the per-sample gradients'
covariance; linear lr scaling holds up to batches of about B_noise. Their B_simple estimates it
from the squared norms of mean gradients over batches of two sizes b < B, since
E|G_b|^2 = |G|^2 + tr(Sigma) / b:

    |G|^2     ~ (B |G_B|^2 - b |G_b|^2) / (B - b)
    tr(Sigma) ~ (|G_b|^2 - |G_B|^2) / (1/b - 1/B)

each averaged over many batches before the ratio is taken (the ratio of means, as they do).
The sweep measures it at the baseline's weights after every epoch (`measure`): each big batch
is cut into B / b small ones, so the small and big norms come from the same samples.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch

from asr.utils.errors import InputError

# The paper's own numbers for Switchboard: SSGD with the lr scaled linearly converges up to a
# global batch of 4,096 21-frame samples and ADPSGD to 12,288; linear scaling holding to 4,096
# puts SSGD's critical batch, so B_noise, at 4,096 samples or more.
PAPER_SWITCHBOARD = {
    "noise_scale_at_least": 4096,
    "unit": "21-frame samples",
    "why": "B_crit ~ B_noise (arXiv 1812.06162); the paper's SSGD scales its lr linearly and converges up to "
    "a global batch of 4,096 samples on SWB-2000 (ADPSGD to 12,288)",
}


@dataclass(frozen=True)
class NoiseScale:
    small_batch: int
    big_batch: int
    batches: int  # big batches measured (each also gives big_batch / small_batch small ones)
    gradient_sq: float  # |G|^2
    trace: float  # tr(Sigma), per sample

    @property
    def simple(self) -> float | None:
        """B_simple, in the batches' unit; None where |G|^2 or tr(Sigma) came out at or below 0
        (the estimate's own sampling noise dominates it: measure more batches)."""
        return self.trace / self.gradient_sq if self.gradient_sq > 0 and self.trace > 0 else None

    def to_json(self) -> dict:
        return asdict(self) | {"simple": self.simple}


def estimate(small_sq: Sequence[float], big_sq: Sequence[float], small_batch: int, big_batch: int) -> NoiseScale:
    """B_simple from the squared norms of mean gradients over batches of `small_batch` and
    `big_batch` samples."""
    check_batches(small_batch, big_batch)
    if not small_sq or not big_sq:
        raise ValueError("estimate: no gradient norms to estimate the noise scale from")
    small, big = statistics.fmean(small_sq), statistics.fmean(big_sq)
    b, B = small_batch, big_batch
    return NoiseScale(
        small_batch=b,
        big_batch=B,
        batches=len(big_sq),
        gradient_sq=(B * big - b * small) / (B - b),
        trace=(small - big) / (1 / b - 1 / B),
    )


def check_batches(small_batch: int, big_batch: int) -> None:
    if not 0 < small_batch < big_batch or big_batch % small_batch:
        raise InputError(
            f"sweep.noise_batches=[{small_batch}, {big_batch}]: give a small and a big batch, the big a multiple "
            "of the small (e.g. [128, 1024])"
        )


def squared_norm(parameters: Sequence[torch.Tensor]) -> float:
    return float(sum(p.grad.double().pow(2).sum() for p in parameters if p.grad is not None))


def measure(
    model: torch.nn.Module,
    batch_loss: Callable[[torch.nn.Module, list[list[int]]], tuple[torch.Tensor, int]],
    num_items: int,
    small_batch: int,
    big_batch: int,
    batches: int,
    seed: int,
) -> NoiseScale:
    """B_simple at `model`'s weights, over `batches` big batches of items drawn without
    replacement from range(num_items) (`batch_loss(model, [positions])`: summed loss, count).
    The weights, their gradients and torch's random state are left as they were."""
    check_batches(small_batch, big_batch)
    parameters = [p for p in model.parameters() if p.requires_grad]
    saved = [None if p.grad is None else p.grad.clone() for p in parameters]
    order = torch.randperm(num_items, generator=torch.Generator().manual_seed(seed)).tolist()
    batches = min(batches, num_items // big_batch)
    if batches < 1:
        raise InputError(
            f"sweep.noise_batches: a big batch of {big_batch} needs that many samples; there are {num_items}"
        )
    small_sq, big_sq = [], []
    with torch.random.fork_rng(devices=[]):
        for k in range(batches):
            big = order[k * big_batch : (k + 1) * big_batch]
            total = [torch.zeros_like(p, dtype=torch.float64) for p in parameters]
            count = 0
            for start in range(0, big_batch, small_batch):
                model.zero_grad(set_to_none=True)
                loss, n = batch_loss(model, [big[start : start + small_batch]])
                (loss / n).backward()  # the small batch's mean gradient
                small_sq.append(squared_norm(parameters))
                for t, p in zip(total, parameters):
                    if p.grad is not None:
                        t.add_(p.grad.double(), alpha=n)
                count += n
            big_sq.append(float(sum(t.pow(2).sum() for t in total)) / count**2)
    for p, grad in zip(parameters, saved):
        p.grad = grad
    return estimate(small_sq, big_sq, small_batch, big_batch)
