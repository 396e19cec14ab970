"""Full-covariance Gaussian mixture models (the i-vector recipe's UBM), with Gaussian selection.

As in Kaldi's speaker-id recipe (`sid/train_full_ubm.sh`): the full UBM starts from a trained
diagonal one (`gmm-global-to-fgmm`), every frame's candidate components are the diagonal
UBM's top `num_gselect` (`gmm-gselect`, once), and EM (`fgmm-global-acc-stats` /
`fgmm-global-est`) re-estimates weights, means and full covariances with posteriors over the
selected components only. The objective EM raises is the selected-mixture log-likelihood
sum_t log sum_{c in S_t} w_c N(x_t; mu_c, Sigma_c).

A component's log-likelihood is computed as gconst_c - |L_c^T (x - mu_c)|^2 / 2 with L_c the
Cholesky factor of its precision, in float64, grouping the selected (frame, component) pairs
by component: T x k x D^2 operations instead of T x C x D^2 for all components.

Files: Kaldi's binary FullGmm (asr.kaldi.gmm), what `fgmm-global-copy` reads.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import torch
from torch import Tensor

from asr.kaldi.gmm import read_full_gmm, write_full_gmm
from asr.features.gmm import MIN_LOG_POSTERIOR, DiagGmm

CHUNK_FRAMES = 8192  # frames per pass over the selected pairs (bounds memory to chunk x num_gselect x D)
NUM_GSELECT = 20  # Kaldi's train_full_ubm.sh --num-gselect
VARIANCE_FLOOR = 0.001  # Kaldi's MleFullGmmOptions: floor on covariance eigenvalues...
MAX_CONDITION = 1.0e4  # ...and on their ratio to the largest
MIN_OCCUPANCY = 100.0  # components with fewer frames keep their parameters (MleFullGmmOptions)


@dataclass
class FullGmm:
    weights: Tensor  # (C,)
    means: Tensor  # (C, D)
    covariances: Tensor  # (C, D, D)
    _derived: tuple[Tensor, Tensor] | None = field(default=None, repr=False, compare=False)

    @property
    def num_components(self) -> int:
        return int(self.weights.shape[0])

    @property
    def dim(self) -> int:
        return int(self.means.shape[1])

    @classmethod
    def from_diag(cls, gmm: DiagGmm) -> "FullGmm":
        """Kaldi's gmm-global-to-fgmm: the same Gaussians with diagonal covariance matrices."""
        means = gmm.means.double()
        return cls(gmm.weights.double(), means, torch.diag_embed(gmm.variances.double()))

    def precision_factors(self) -> tuple[Tensor, Tensor]:
        """(L, gconst): P_c = L_c L_c^T, gconst_c = log w_c - D/2 log 2 pi + 1/2 log|P_c|."""
        if self._derived is None:
            precisions = torch.linalg.inv(self.covariances)
            factors = torch.linalg.cholesky(0.5 * (precisions + precisions.transpose(1, 2)))
            half_logdet = factors.diagonal(dim1=1, dim2=2).log().sum(dim=1)
            gconst = self.weights.log() - 0.5 * self.dim * math.log(2 * math.pi) + half_logdet
            self._derived = (factors, gconst)
        return self._derived

    def selected_loglikes(self, x: Tensor, selection: Tensor) -> Tensor:
        """(T, k): log w_c + log N(x_t; mu_c, Sigma_c) for c = selection[t, j]."""
        factors, gconst = self.precision_factors()
        x = x.to(self.means)
        frames = torch.arange(x.shape[0], device=x.device).repeat_interleave(selection.shape[1])
        out = x.new_empty(selection.numel())
        for component, pairs in _pairs_by_component(selection.reshape(-1)):
            whitened = (x[frames[pairs]] - self.means[component]) @ factors[component]
            out[pairs] = gconst[component] - 0.5 * (whitened * whitened).sum(dim=1)
        return out.reshape(selection.shape)

    def posteriors(self, x: Tensor, selection: Tensor) -> tuple[Tensor, Tensor]:
        """Posteriors over each frame's selected components (T, k), and the frames' log-likelihoods
        under the selected mixture (T,)."""
        loglikes = self.selected_loglikes(x, selection)
        total = torch.logsumexp(loglikes, dim=1)
        log_posteriors = loglikes - total[:, None]
        # Exactly 0 below e^-70 (of no consequence): exp would return denormals there, and every
        # later product with them is ~10x slower.
        return log_posteriors.masked_fill(log_posteriors < MIN_LOG_POSTERIOR, -math.inf).exp(), total

    def save(self, path: str | os.PathLike) -> None:
        write_full_gmm(path, *(t.detach().cpu().double().numpy() for t in (self.weights, self.means, self.covariances)))

    @classmethod
    def load(cls, path: str | os.PathLike, device: torch.device | str = "cpu") -> "FullGmm":
        weights, means, covariances = read_full_gmm(path)
        return cls(*(torch.from_numpy(a).to(device) for a in (weights, means, covariances)))


def _pairs_by_component(components: Tensor):
    """(component, positions in `components` holding it) for every component that occurs."""
    order = torch.argsort(components, stable=True)
    counts = torch.bincount(components)
    start = 0
    for component, count in enumerate(counts.tolist()):
        if count:
            yield component, order[start : start + count]
            start += count


def gselect(gmm: DiagGmm, x: Tensor, num_gselect: int = NUM_GSELECT) -> Tensor:
    """Kaldi's gmm-gselect: each frame's `num_gselect` best components of a diagonal GMM (T, k)."""
    k = min(num_gselect, gmm.num_components)
    return torch.cat([gmm.component_loglikes(chunk).topk(k, dim=1).indices for chunk in x.split(CHUNK_FRAMES)])


@dataclass
class FullGmmStats:
    occupancy: Tensor  # (C,)
    first: Tensor  # (C, D)
    second: Tensor  # (C, D, D): sum of gamma x x^T
    loglike: float = 0.0
    frames: int = 0


def accumulate(gmm: FullGmm, x: Tensor, selection: Tensor) -> FullGmmStats:
    """EM statistics of frames `x` (T, D) with posteriors over their selected components."""
    c, d = gmm.num_components, gmm.dim
    stats = FullGmmStats(gmm.means.new_zeros(c), gmm.means.new_zeros(c, d), gmm.means.new_zeros(c, d, d))
    for chunk, chosen in zip(x.split(CHUNK_FRAMES), selection.split(CHUNK_FRAMES)):
        chunk = chunk.to(gmm.means)
        posteriors, loglikes = gmm.posteriors(chunk, chosen)
        stats.loglike += float(loglikes.sum())
        stats.frames += int(chunk.shape[0])
        frames = torch.arange(chunk.shape[0], device=chunk.device).repeat_interleave(chosen.shape[1])
        weights = posteriors.reshape(-1)
        for component, pairs in _pairs_by_component(chosen.reshape(-1)):
            frame, gamma = chunk[frames[pairs]], weights[pairs]
            stats.occupancy[component] += gamma.sum()
            stats.first[component] += gamma @ frame
            stats.second[component] += (frame * gamma[:, None]).T @ frame
    return stats


def maximize(
    gmm: FullGmm,
    stats: FullGmmStats,
    min_occupancy: float = MIN_OCCUPANCY,
    variance_floor: float = VARIANCE_FLOOR,
    max_condition: float = MAX_CONDITION,
) -> FullGmm:
    """M-step (Kaldi's MleFullGmmUpdate): covariance eigenvalues floored at max(variance_floor,
    largest / max_condition); components with less than `min_occupancy` keep their parameters."""
    trained = stats.occupancy >= min_occupancy
    safe = stats.occupancy.clamp(min=1e-10)
    means = torch.where(trained[:, None], stats.first / safe[:, None], gmm.means)
    covariances = stats.second / safe[:, None, None] - means[:, :, None] * means[:, None, :]
    covariances = torch.where(
        trained[:, None, None], _floor_eigenvalues(covariances, variance_floor, max_condition), gmm.covariances
    )
    weights = torch.where(trained, stats.occupancy / stats.occupancy.sum(), gmm.weights)
    return FullGmm(weights / weights.sum(), means, covariances)


def _floor_eigenvalues(covariances: Tensor, floor: float, max_condition: float) -> Tensor:
    symmetric = 0.5 * (covariances + covariances.transpose(1, 2))
    values, vectors = torch.linalg.eigh(symmetric)
    lowest = torch.maximum(values.new_tensor(floor), values[:, -1:] / max_condition)
    floored = torch.maximum(values, lowest)
    return (vectors * floored[:, None, :]) @ vectors.transpose(1, 2)


@dataclass
class FullUbmReport:
    loglike_per_frame: list[float] = field(default_factory=list)  # before each M-step


def train_full_ubm(
    diag: DiagGmm, x: Tensor, iters: int = 4, num_gselect: int = NUM_GSELECT, min_occupancy: float = MIN_OCCUPANCY
) -> tuple[FullGmm, FullUbmReport]:
    """A full-covariance UBM from a diagonal one (Kaldi's train_full_ubm.sh: 4 iterations, 20
    components selected once per frame by the diagonal UBM)."""
    x = x.to(device=diag.means.device, dtype=torch.float64)
    selection = gselect(diag, x, num_gselect)
    gmm = FullGmm.from_diag(diag)
    report = FullUbmReport()
    for _ in range(iters):
        stats = accumulate(gmm, x, selection)
        report.loglike_per_frame.append(stats.loglike / max(stats.frames, 1))
        gmm = maximize(gmm, stats, min_occupancy)
    return gmm, report
