"""Feature-space MLLR (constrained MLLR): a per-speaker affine transform y = A x + b that
maximises the likelihood of the speaker's frames under a diagonal GMM.

With W = [A b] (d x (d+1)), xi = [x; 1] and posteriors gamma_tm of the GMM's components
computed on the currently transformed frames, the EM auxiliary function is

    Q(W) = beta log|det A| + sum_i (w_i . k_i) - 1/2 sum_i w_i G_i w_i^T

    beta = sum_tm gamma_tm,   K = sum_tm gamma_tm (mu_m / var_m) xi_t^T   (row i is k_i),
    G_i  = sum_tm gamma_tm / var_mi  xi_t xi_t^T                           ((d+1) x (d+1)).

Gales' update maximises Q exactly one row at a time: with c_i the i-th row of the cofactors
of A (extended by 0), w_i = (alpha c_i + k_i) G_i^-1 where alpha solves a quadratic. This is
Kaldi's `gmm-est-fmllr --fmllr-update-type=full` (FmllrInnerUpdate), including its default
minimum count of 500 frames below which the transform stays the identity.

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

from asr.features.gmm import OUTER_PRODUCT_CHUNK, DiagGmm

MIN_COUNT = 500.0  # Kaldi's --fmllr-min-count
PASSES = 40  # most row passes per EM iteration (Kaldi's --fmllr-num-iters)
ITERS = 5  # most EM iterations per estimate (Kaldi's two-pass scripts make 2)
TOLERANCE = 1e-3  # nats per frame: a pass or an EM iteration that gains less ends its loop


@dataclass
class FmllrStats:
    beta: float
    K: np.ndarray  # (d, d+1)
    G: np.ndarray  # (d, d+1, d+1)

    @property
    def dim(self) -> int:
        return self.K.shape[0]


def identity_transform(dim: int) -> np.ndarray:
    return np.hstack([np.eye(dim), np.zeros((dim, 1))])


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


def log_det(transform: np.ndarray) -> float:
    return float(np.linalg.slogdet(transform[:, :-1])[1])


def aux_function(transform: np.ndarray, stats: FmllrStats) -> float:
    """Q(W) up to a constant (Kaldi's FmllrAuxFuncDiagGmm)."""
    quadratic = np.einsum("ij,ijk,ik->", transform, stats.G, transform)
    return stats.beta * log_det(transform) + float((transform * stats.K).sum()) - 0.5 * quadratic


def update_row(
    transform: np.ndarray, row: int, inv_G: np.ndarray, k: np.ndarray, beta: float, inverse: np.ndarray | None = None
) -> None:
    """Gales' exact maximisation of Q over row `row` of W, in place (Kaldi's FmllrInnerUpdate).

    `inverse` is inv(A) if the caller keeps it (then it is updated in place too)."""
    d = transform.shape[0]
    if inverse is None:
        inverse = np.linalg.inv(transform[:, :d])
    cofactor = np.zeros(d + 1)
    cofactor[:d] = inverse[:, row]  # row of inv(A)^T: the cofactors divided by det(A)
    cofactor_inv_g = inv_G @ cofactor
    e1, e2 = cofactor_inv_g @ cofactor, cofactor_inv_g @ k
    root = np.sqrt(e2 * e2 + 4 * e1 * beta)
    candidates = [(-e2 + root) / (2 * e1), (-e2 - root) / (2 * e1)]
    alpha = max(candidates, key=lambda a: beta * np.log(abs(a * e1 + e2)) - 0.5 * a * a * e1)
    new_row = inv_G @ (alpha * cofactor + k)
    change = new_row[:d] - transform[row, :d]
    transform[row] = new_row
    # Sherman-Morrison: A gains e_row change^T, so inv(A) changes by a rank-one term (O(d^2)
    # instead of a new O(d^3) inverse for every row).
    column = inverse[:, row].copy()
    inverse -= np.outer(column, change @ inverse) / (1.0 + change @ column)


def update_transform(
    transform: np.ndarray,
    stats: FmllrStats,
    passes: int = PASSES,
    trace: list[float] | None = None,
    tolerance: float = 0.0,
) -> np.ndarray:
    """Sweeps of row updates from `transform` until one raises Q by less than `tolerance`
    nats per frame, at most `passes`; Q before and after every row update goes to `trace`."""
    inv_G = np.linalg.inv(stats.G)
    new = transform.copy()
    start = previous = aux_function(new, stats)
    if trace is not None:
        trace.append(start)
    for _ in range(passes):
        inverse = np.linalg.inv(new[:, :-1])  # fresh once per sweep, so round-off cannot build up
        for row in range(stats.dim):
            update_row(new, row, inv_G[row], stats.K[row], stats.beta, inverse)
            if trace is not None:
                trace.append(aux_function(new, stats))
        current = aux_function(new, stats)
        if current - previous < tolerance * stats.beta:
            break
        previous = current
    # Rounding can make a converged update a hair worse; keep the old transform then (as Kaldi).
    return new if aux_function(new, stats) >= start else transform


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
