"""LDA and MLLT estimated from their statistics, in numpy (Kaldi's est-lda and est-mllt).

  LDA   W maximises between-class over within-class scatter: the top generalised
        eigenvectors of (S_b, S_w), scaled so the within-class covariance becomes the
        identity (est-lda);
  MLLT  T maximises beta log|det T| - 1/2 sum_i t_i G_i t_i^T with
        G_i = sum_tm gamma_tm / var_mi (z_t - mu_m)(z_t - mu_m)^T, one row at a time
        (MlltAccs::Update).

Two callers gather the statistics: a UBM's soft classes (asr/features/lda_mllt.py, in torch)
and a GMM-HMM's alignment (asr/gmm/adaptation.py, in numpy); this module imports no torch, so
that the GMM stages' processes start without it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg

RIDGE = 1e-6  # relative regularisation of the within-class scatter (spliced features are nearly collinear)


# --------------------------------------------------------------------------- LDA


@dataclass
class LdaStats:
    occupancy: np.ndarray  # (M,) soft class counts
    first: np.ndarray  # (M, K) class sums
    scatter: np.ndarray  # (K, K) sum of x x^T over all frames
    total: np.ndarray  # (K,) sum of x

    @classmethod
    def zeros(cls, classes: int, dim: int) -> "LdaStats":
        return cls(np.zeros(classes), np.zeros((classes, dim)), np.zeros((dim, dim)), np.zeros(dim))

    def add(self, other: "LdaStats") -> None:
        self.occupancy += other.occupancy
        self.first += other.first
        self.scatter += other.scatter
        self.total += other.total


def scatter_matrices(stats: LdaStats) -> tuple[np.ndarray, np.ndarray]:
    """Within- and between-class covariances (K, K), each divided by the frame count."""
    count = float(stats.occupancy.sum())
    used = stats.occupancy > 0
    class_means = stats.first[used] / stats.occupancy[used, None]
    explained = (class_means.T * stats.occupancy[used]) @ class_means  # sum_m n_m mu_m mu_m^T
    mean = stats.total / count
    within = (stats.scatter - explained) / count
    between = explained / count - np.outer(mean, mean)
    return within, between


def estimate_lda(stats: LdaStats, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The (dim, K) LDA projection and all generalised eigenvalues (descending)."""
    within, between = scatter_matrices(stats)
    within = 0.5 * (within + within.T) + RIDGE * np.trace(within) / len(within) * np.eye(len(within))
    between = 0.5 * (between + between.T)
    values, vectors = scipy.linalg.eigh(between, within)  # vectors^T within vectors = I
    order = np.argsort(values)[::-1]
    return vectors[:, order[:dim]].T.copy(), values[order]


# -------------------------------------------------------------------------- MLLT


@dataclass
class MlltStats:
    beta: float
    G: np.ndarray  # (d, d, d)


def mllt_aux(transform: np.ndarray, stats: MlltStats) -> float:
    return stats.beta * float(np.linalg.slogdet(transform)[1]) - 0.5 * float(
        np.einsum("ij,ijk,ik->", transform, stats.G, transform)
    )


def update_mllt(stats: MlltStats, passes: int = 10, trace: list[float] | None = None) -> np.ndarray:
    """The MLLT matrix (d, d) from the identity: row i = sqrt(beta / (c G_i^-1 c^T)) c G_i^-1
    with c the i-th cofactor row (the fMLLR update without offset and linear term)."""
    d = stats.G.shape[0]
    inv_G = np.linalg.inv(stats.G)
    transform = np.eye(d)
    for _ in range(passes):
        for row in range(d):
            cofactor = np.linalg.inv(transform)[:, row]
            direction = inv_G[row] @ cofactor
            transform[row] = np.sqrt(stats.beta / (cofactor @ direction)) * direction
            if trace is not None:
                trace.append(mllt_aux(transform, stats))
    return transform
