"""Gales' row-by-row update of a feature-space MLLR transform from its statistics, in numpy.

With W = [A b] (d x (d+1)), xi = [x; 1] and posteriors gamma_tm of a diagonal GMM's components
computed on the currently transformed frames, the EM auxiliary function is

    Q(W) = beta log|det A| + sum_i (w_i . k_i) - 1/2 sum_i w_i G_i w_i^T

    beta = sum_tm gamma_tm,   K = sum_tm gamma_tm (mu_m / var_m) xi_t^T   (row i is k_i),
    G_i  = sum_tm gamma_tm / var_mi  xi_t xi_t^T                           ((d+1) x (d+1)).

Gales' update maximises Q exactly one row at a time: with c_i the i-th row of the cofactors
of A (extended by 0), w_i = (alpha c_i + k_i) G_i^-1 where alpha solves a quadratic. This is
Kaldi's `gmm-est-fmllr --fmllr-update-type=full` (FmllrInnerUpdate), including its default
minimum count of 500 frames below which the transform stays the identity.

Two callers gather the statistics: a UBM's (asr/features/fmllr/transform.py, in torch) and a
GMM-HMM's alignment (asr/gmm/adaptation.py, in numpy); this module imports no torch, so that
the GMM stages' processes start without it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
