"""Feature-space MLLR (constrained MLLR) under a UBM: a per-speaker affine transform y = A x + b
that maximises the likelihood of the speaker's frames under a diagonal GMM (asr.features.gmm,
in torch). The statistics are gathered here; Gales' row update is asr/features/fmllr/update.py.

Passes over the rows run to convergence: at most 40 per EM iteration (Kaldi's
--fmllr-num-iters), stopping once a pass raises Q by less than `tolerance` nats per frame. EM
iterations (posteriors recomputed on the transformed frames) stop once the objective (log-
likelihood + log|det A| per frame) rises by less than `tolerance`, or after `iters` (5 by
default: each costs an accumulation over all the speaker's frames; on real speech the first
3 give ~92% of the gain that 20 give).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from asr.features.fmllr.update import (
    ITERS,
    MIN_COUNT,
    PASSES,
    TOLERANCE,
    FmllrStats,
    identity_transform,
    log_det,
    update_transform,
)
from asr.features.gmm import OUTER_PRODUCT_CHUNK, DiagGmm


def transform_frames(x: Tensor, transform: np.ndarray) -> Tensor:
    w = torch.as_tensor(transform, dtype=x.dtype, device=x.device)
    return x @ w[:, :-1].T + w[:, -1]


def accumulate(gmm: DiagGmm, x: Tensor, transform: np.ndarray) -> tuple[FmllrStats, float]:
    """fMLLR statistics of frames `x` (T, d) with posteriors from the transformed frames, and
    the summed log-likelihood of the transformed frames (without the Jacobian term)."""
    d = gmm.dim
    inv_vars = 1.0 / gmm.variances
    means_invvars = gmm.means * inv_vars
    beta, loglike = 0.0, 0.0
    K = gmm.means.new_zeros(d, d + 1)
    rows, cols = torch.triu_indices(d + 1, d + 1, device=gmm.means.device)
    G_upper = gmm.means.new_zeros(d, rows.shape[0])
    for chunk in x.split(OUTER_PRODUCT_CHUNK):
        chunk = chunk.to(gmm.means)
        posteriors, loglikes = gmm.posteriors(transform_frames(chunk, transform))
        posteriors = posteriors.to(chunk.dtype)
        xi = torch.cat([chunk, chunk.new_ones(chunk.shape[0], 1)], dim=1)
        beta += float(posteriors.sum())
        loglike += float(loglikes.sum())
        K += (posteriors @ means_invvars).T @ xi
        # G_i = sum_t g_ti xi_t xi_t^T for all i in one product with the frames' outer products,
        # their upper triangles only (G_i is symmetric: half the work)
        G_upper += (posteriors @ inv_vars).T @ (xi[:, rows] * xi[:, cols])
    G = gmm.means.new_zeros(d, d + 1, d + 1)
    G[:, rows, cols] = G_upper
    G[:, cols, rows] = G_upper
    return FmllrStats(beta, K.cpu().numpy(), G.cpu().numpy()), loglike


@dataclass
class FmllrResult:
    transform: np.ndarray  # (d, d+1)
    count: float  # frames' total posterior (beta)
    updated: bool  # False: too little data, identity kept
    loglike_before: float  # per frame, untransformed features
    loglike_after: float  # per frame, transformed features (no Jacobian)
    objective: list[float] = field(default_factory=list)  # per frame, loglike + log|det A|, per EM iteration
    aux_trace: list[list[float]] = field(default_factory=list)  # per EM iteration: Q before and after each row update


def estimate_fmllr(
    gmm: DiagGmm,
    x: Tensor | np.ndarray,
    iters: int = ITERS,
    passes: int = PASSES,
    min_count: float = MIN_COUNT,
    trace: bool = False,
    tolerance: float = TOLERANCE,
) -> FmllrResult:
    """The fMLLR transform of one speaker's frames `x` (T, d), starting from the identity.

    EM iterations continue while the objective per frame rises by at least `tolerance`
    (at most `iters`); row passes within one likewise (at most `passes`)."""
    x = torch.as_tensor(x).to(gmm.means)
    frames = max(int(x.shape[0]), 1)
    transform = identity_transform(gmm.dim)
    stats, loglike = accumulate(gmm, x, transform)
    result = FmllrResult(transform, stats.beta, False, loglike / frames, loglike / frames, [loglike / frames])
    if stats.beta < min_count:
        return result
    for iteration in range(iters):
        if iteration > 0:
            stats, loglike = accumulate(gmm, x, transform)
            result.objective.append(loglike / frames + log_det(transform))
            if result.objective[-1] - result.objective[-2] < tolerance:
                break
        if trace:
            result.aux_trace.append([])
        transform = update_transform(transform, stats, passes, result.aux_trace[-1] if trace else None, tolerance)
    else:
        loglike = float(gmm.log_likelihood(transform_frames(x, transform)).sum())
        result.objective.append(loglike / frames + log_det(transform))
    result.transform, result.updated, result.loglike_after = transform, True, loglike / frames
    return result
