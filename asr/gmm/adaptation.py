"""The feature transforms of the LDA+MLLT and SAT systems, estimated on a GMM-HMM's aligned
frames as Kaldi's acc-lda/est-lda, gmm-acc-mllt/est-mllt and gmm-est-fmllr do.

The estimators are the toolkit's own (asr/features/lda_mllt.py: LDA and MLLT; asr/features/
fmllr/transform.py: Gales' row-by-row fMLLR); what is here are their statistics when the
Gaussians' posteriors come from an alignment (each frame's posteriors over its pdf's
Gaussians only) instead of a UBM, gathered per job and summed:

  LDA    classes: the pdfs of the previous system's alignment (tied states), silence weighted 0;
  MLLT   G_i = sum_t sum_m gamma_tm / var_mi (x_t - mu_m)(x_t - mu_m)^T over non-silence
         frames, from sum_t W_ti x_t x_t^T (W_ti = sum_m gamma_tm / var_mi) and the same
         frames' per-Gaussian counts and sums (so only the first term touches every frame);
  fMLLR  per speaker, beta, K = sum_t w_t M_t xi_t^T and G_i = sum_t w_t W_ti xi_t xi_t^T
         (M_t = sum_m gamma_tm mu_m / var_m, xi = [x; 1], w_t the frame's weight), with the
         posteriors from the speaker's currently adapted frames and x the unadapted ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse

from asr.features.fmllr.update import (
    MIN_COUNT,
    PASSES,
    TOLERANCE,
    FmllrStats,
    aux_function,
    identity_transform,
    update_transform,
)
from asr.features.lda_mllt_update import LdaStats, MlltStats
from asr.gmm.stats import FrameWeights, ModelArrays, Stats

OUTER_CHUNK = 8192  # frames whose outer products are formed at once ((d+1)(d+2)/2 floats each)


def upper_outer(x: np.ndarray) -> np.ndarray:
    """(T, n) -> (T, n (n+1) / 2): each frame's outer product, its upper triangle."""
    rows, cols = np.triu_indices(x.shape[1])
    return x[:, rows] * x[:, cols]


def symmetric(upper: np.ndarray, n: int) -> np.ndarray:
    """(k, n (n+1) / 2) upper triangles -> (k, n, n) symmetric matrices."""
    rows, cols = np.triu_indices(n)
    out = np.zeros((upper.shape[0], n, n))
    out[:, rows, cols] = upper
    out[:, cols, rows] = upper
    return out


def weighted_outer_sum(weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    """sum_t weights[t, i] * upper(x_t x_t^T) for every i: (D, n (n+1) / 2)."""
    n = x.shape[1]
    out = np.zeros((weights.shape[1], n * (n + 1) // 2))
    for start in range(0, len(x), OUTER_CHUNK):
        stop = start + OUTER_CHUNK
        out += weights[start:stop].T @ upper_outer(x[start:stop])
    return out


# --------------------------------------------------------------------------------- LDA


def add_lda_frames(stats: LdaStats | None, classes: np.ndarray, x: np.ndarray, num_classes: int) -> LdaStats:
    """acc-lda with hard classes (silence frames already left out): `x` (T, K) spliced frames."""
    frames = np.asarray(x, np.float64)
    if stats is None:
        stats = LdaStats.zeros(num_classes, frames.shape[1])
    classes = np.asarray(classes, np.int64)
    # each class's frames summed as one sparse (classes x frames) product: O(T K), unlike np.add.at
    membership = scipy.sparse.csr_matrix(
        (np.ones(len(classes)), (classes, np.arange(len(classes)))), shape=(num_classes, len(classes))
    )
    stats.occupancy += np.bincount(classes, minlength=num_classes)
    stats.first += membership @ frames
    stats.scatter += frames.T @ frames
    stats.total += frames.sum(axis=0)
    return stats


def merge_lda(parts: list[LdaStats]) -> LdaStats:
    total = parts[0]
    for part in parts[1:]:
        total.add(part)
    return total


# -------------------------------------------------------------------------------- MLLT


@dataclass
class MlltAccs:
    """One job's MLLT statistics: the frames' term and the same frames' Gaussian statistics."""

    frames_term: np.ndarray  # (d, d (d+1) / 2)
    gauss: Stats

    def add(self, other: "MlltAccs") -> None:
        self.frames_term += other.frames_term
        self.gauss.add(other.gauss)


def mllt_frames_term(weights: FrameWeights, x: np.ndarray) -> np.ndarray:
    return weighted_outer_sum(weights.inv_vars, x.astype(np.float64))


def mllt_stats(accs: MlltAccs, model: ModelArrays) -> MlltStats:
    """gmm-acc-mllt's statistics, completed with the model's means (see the module's docstring)."""
    d = accs.frames_term.shape[0]
    G = symmetric(accs.frames_term, d)
    inv_vars, n, F = model.inv_vars, accs.gauss.occupancy, accs.gauss.sum_x
    mu = model.means_invvars / inv_vars
    cross = np.einsum("mi,mj,mk->ijk", inv_vars, F, mu)
    G += -cross - cross.transpose(0, 2, 1) + np.einsum("mi,m,mj,mk->ijk", inv_vars, n, mu, mu)
    return MlltStats(float(n.sum()), G)


# ------------------------------------------------------------------------------- fMLLR


@dataclass
class SpeakerAccs:
    """One speaker's fMLLR statistics (G as upper triangles)."""

    beta: float
    K: np.ndarray  # (d, d+1)
    G_upper: np.ndarray  # (d, (d+1)(d+2)/2)

    @classmethod
    def zeros(cls, dim: int) -> "SpeakerAccs":
        return cls(0.0, np.zeros((dim, dim + 1)), np.zeros((dim, (dim + 1) * (dim + 2) // 2)))

    def add(self, other: "SpeakerAccs") -> None:
        self.beta += other.beta
        self.K += other.K
        self.G_upper += other.G_upper

    def stats(self) -> FmllrStats:
        d = self.K.shape[0]
        return FmllrStats(self.beta, self.K, symmetric(self.G_upper, d + 1))


def speaker_accs(weights: FrameWeights, x: np.ndarray, frame_weight: np.ndarray) -> SpeakerAccs:
    """A speaker's statistics from its frames `x` (T, d) unadapted, their FrameWeights under
    the adapted frames, and each frame's weight (silence: 0 in training)."""
    xi = np.hstack([x.astype(np.float64), np.ones((len(x), 1))])
    w = frame_weight[:, None]
    return SpeakerAccs(
        float(frame_weight.sum()),  # each frame's posteriors sum to 1
        (weights.means_invvars * w).T @ xi,
        weighted_outer_sum(weights.inv_vars * w, xi),
    )


@dataclass
class SpeakerTransforms:
    """The fMLLR transforms of a set's speakers and what estimating them did."""

    transforms: dict[str, np.ndarray] = field(default_factory=dict)
    updated: int = 0  # speakers with at least MIN_COUNT frames (the others keep theirs)
    aux_gain_per_frame: float = 0.0


def estimate_transforms(
    accs: dict[str, SpeakerAccs], current: dict[str, np.ndarray], dim: int, min_count: float = MIN_COUNT
) -> SpeakerTransforms:
    """gmm-est-fmllr for every speaker from its summed statistics, starting from (and with too
    little data keeping) its current transform."""
    out = SpeakerTransforms()
    gain, frames = 0.0, 0.0
    for speaker, acc in sorted(accs.items()):
        start = current.get(speaker, identity_transform(dim))
        if acc.beta < min_count:
            out.transforms[speaker] = start
            continue
        stats = acc.stats()
        new = update_transform(start, stats, PASSES, tolerance=TOLERANCE)
        gain += aux_function(new, stats) - aux_function(start, stats)
        frames += acc.beta
        out.transforms[speaker] = new
        out.updated += 1
    for speaker, transform in current.items():
        out.transforms.setdefault(speaker, transform)
    out.aux_gain_per_frame = gain / max(frames, 1.0)
    return out
