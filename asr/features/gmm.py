"""Diagonal-covariance Gaussian mixture models trained by EM (a universal background model).

The GMM is what fMLLR adapts features towards, and its components are the classes of the
LDA (asr.features.lda_mllt). Training follows Kaldi's `gmm-global-init-from-feats`: start
from one Gaussian (the data's mean and variance), split the heaviest component until the
target size is reached with a few EM iterations after each split, then iterate EM. Likelihoods
are one matrix product per chunk of frames, in torch, so they run on CPU or GPU; parameters
and statistics are float64 (Kaldi accumulates in double), the E-step float32 by default.

Files: the GMM is saved in Kaldi's binary DiagGmm format (asr.kaldi.gmm), so Kaldi's
`gmm-global-get-post` or `gmm-global-copy --binary=false` read it.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from asr.kaldi.gmm import read_diag_gmm, write_diag_gmm
from asr.utils.memory import release_freed_memory

log = logging.getLogger("asr.features")

# Frames per likelihood matrix product (bounds memory to chunk x components). 8,192 frames'
# likelihoods (8 MB for 256 components) stay in cache: EM runs 1.2-1.4x faster than with 32,768.
CHUNK_FRAMES = 8192
# Frames per chunk of per-frame outer products (fMLLR, MLLT: chunk x (d+1)^2 floats) and of
# float64 LDA statistics: 1,024 keeps a chunk's 7 MB in cache (4,096: 85 MB, 20% more CPU).
OUTER_PRODUCT_CHUNK = 1024
MIN_LOG_POSTERIOR = -70.0  # relative to the best component of the frame
SPLIT_PERTURBATION = 0.2  # new means at mean +- this many standard deviations (Kaldi's DiagGmm::Split)


@dataclass
class DiagGmm:
    weights: Tensor  # (M,)
    means: Tensor  # (M, D)
    variances: Tensor  # (M, D)
    # dtype of the E-step (likelihoods, posteriors): float32 is 3x faster and exact enough for
    # posteriors; parameters and accumulated statistics stay in the parameters' dtype.
    precision: torch.dtype = torch.float32

    @property
    def num_components(self) -> int:
        return int(self.weights.shape[0])

    @property
    def dim(self) -> int:
        return int(self.means.shape[1])

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "DiagGmm":
        return DiagGmm(
            *(t.to(device=device, dtype=dtype) for t in (self.weights, self.means, self.variances)),
            precision=self.precision,
        )

    def with_precision(self, precision: torch.dtype) -> "DiagGmm":
        return DiagGmm(self.weights, self.means, self.variances, precision)

    def _estep_terms(self) -> tuple[Tensor, Tensor]:
        """gconst (M,) and the (2D, M) matrix with which [x, x^2] @ matrix + gconst = loglikes."""
        inv_vars = 1.0 / self.variances
        gconst = (
            self.weights.log()
            - 0.5 * self.dim * math.log(2 * math.pi)
            - 0.5 * (self.variances.log() + self.means * self.means * inv_vars).sum(dim=1)
        )
        matrix = torch.cat([self.means * inv_vars, -0.5 * inv_vars], dim=1).T
        return gconst.to(self.precision), matrix.to(self.precision).contiguous()

    def component_loglikes(self, x: Tensor) -> Tensor:
        """(T, M): log w_m + log N(x_t; mu_m, diag var_m), in `precision`."""
        gconst, matrix = self._estep_terms()
        x = x.to(device=self.means.device, dtype=self.precision)
        return torch.addmm(gconst, torch.cat([x, x * x], dim=1), matrix)

    def posteriors(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Component posteriors (T, M) in `precision` and per-frame log-likelihoods (T,) in the
        parameters' dtype."""
        posteriors = self.component_loglikes(x)
        best = posteriors.max(dim=1, keepdim=True).values
        # Clamped so exp never returns denormals (below e^-87 in float32), which make exp and
        # every later product with the posteriors ~10x slower; e^-70 is negligible anyway.
        posteriors.sub_(best).clamp_(min=MIN_LOG_POSTERIOR).exp_()
        total = posteriors.sum(dim=1, keepdim=True)
        posteriors.div_(total)
        return posteriors, (best + total.log()).squeeze(1).to(self.means.dtype)

    def log_likelihood(self, x: Tensor) -> Tensor:
        """Per-frame log-likelihood (T,), computed in chunks."""
        x = torch.as_tensor(x)
        if not x.shape[0]:
            return x.new_zeros(0, dtype=self.means.dtype)
        return torch.cat([self.posteriors(chunk)[1] for chunk in x.split(CHUNK_FRAMES)])

    def save(self, path: str | os.PathLike) -> None:
        write_diag_gmm(path, *(t.detach().cpu().double().numpy() for t in (self.weights, self.means, self.variances)))

    @classmethod
    def load(cls, path: str | os.PathLike, device: torch.device | str = "cpu") -> "DiagGmm":
        weights, means, variances = read_diag_gmm(path)
        return cls(*(torch.from_numpy(a).to(device) for a in (weights, means, variances)))


@dataclass
class GmmStats:
    """Zeroth, first and second order statistics per component, and the total log-likelihood."""

    occupancy: Tensor
    first: Tensor
    second: Tensor
    loglike: float = 0.0
    frames: int = 0

    @classmethod
    def zeros(cls, gmm: DiagGmm) -> "GmmStats":
        m, d = gmm.num_components, gmm.dim
        like = gmm.means
        return cls(like.new_zeros(m), like.new_zeros(m, d), like.new_zeros(m, d))

    def add(self, posteriors: Tensor, x: Tensor, loglikes: Tensor) -> None:
        """A chunk's statistics, computed in the posteriors' precision, summed in float64."""
        x = x.to(posteriors.dtype)
        self.occupancy += posteriors.sum(dim=0).to(self.occupancy.dtype)
        self.first += (posteriors.T @ x).to(self.first.dtype)
        self.second += (posteriors.T @ (x * x)).to(self.second.dtype)
        self.loglike += float(loglikes.sum())
        self.frames += int(x.shape[0])


def accumulate(gmm: DiagGmm, x: Tensor) -> GmmStats:
    """E-step statistics of frames `x` (T, D) under the GMM, in chunks."""
    stats = GmmStats.zeros(gmm)
    for chunk in x.split(CHUNK_FRAMES):
        chunk = chunk.to(gmm.means)
        posteriors, loglikes = gmm.posteriors(chunk)
        stats.add(posteriors, chunk, loglikes)
    return stats


def maximize(gmm: DiagGmm, stats: GmmStats, var_floor: Tensor, min_occupancy: float = 10.0) -> DiagGmm:
    """M-step. Components with less than `min_occupancy` frames keep their parameters (as
    Kaldi's MleDiagGmmUpdate does when it does not remove them); weights are renormalised."""
    occupancy = stats.occupancy
    trained = occupancy >= min_occupancy
    safe = occupancy.clamp(min=1e-10)[:, None]
    means = torch.where(trained[:, None], stats.first / safe, gmm.means)
    variances = torch.where(trained[:, None], stats.second / safe - means * means, gmm.variances)
    variances = torch.maximum(variances, var_floor[None, :])
    weights = torch.where(trained, occupancy / occupancy.sum(), gmm.weights)
    return DiagGmm(weights / weights.sum(), means, variances, gmm.precision)


def split(gmm: DiagGmm, target: int) -> DiagGmm:
    """Split the heaviest component (means +- 0.2 std, half the weight each) until `target`."""
    weights, means, variances = gmm.weights.clone(), gmm.means.clone(), gmm.variances.clone()
    while weights.shape[0] < target:
        heaviest = int(weights.argmax())
        offset = SPLIT_PERTURBATION * variances[heaviest].sqrt()
        weights[heaviest] /= 2
        weights = torch.cat([weights, weights[heaviest : heaviest + 1]])
        means = torch.cat([means, (means[heaviest] - offset)[None]])
        means[heaviest] += offset
        variances = torch.cat([variances, variances[heaviest : heaviest + 1]])
    return DiagGmm(weights, means, variances, gmm.precision)


@dataclass
class EmReport:
    loglike_per_frame: list[float] = field(default_factory=list)  # before each M-step
    components: list[int] = field(default_factory=list)


def single_gaussian(x: Tensor, var_floor: Tensor, precision: torch.dtype = torch.float32) -> DiagGmm:
    mean = x.mean(dim=0)
    var = torch.maximum(x.var(dim=0, unbiased=False), var_floor)
    return DiagGmm(x.new_ones(1), mean[None], var[None], precision)


def variance_floor(x: Tensor, ratio: float) -> Tensor:
    """A floor for every component's variances: `ratio` of the data's variance (HTK's vFloor)."""
    return ratio * x.var(dim=0, unbiased=False).clamp(min=1e-10)


def em(gmm: DiagGmm, x: Tensor, iters: int, var_floor: Tensor, report: EmReport | None = None) -> DiagGmm:
    for _ in range(iters):
        stats = accumulate(gmm, x)
        release_freed_memory()  # the chunks' temporaries, so the next phase does not start above them
        if report is not None:
            report.loglike_per_frame.append(stats.loglike / max(stats.frames, 1))
            report.components.append(gmm.num_components)
        gmm = maximize(gmm, stats, var_floor)
    return gmm


def train_gmm(
    x: Tensor | np.ndarray,
    num_components: int,
    iters_per_split: int = 2,
    final_iters: int = 5,
    var_floor_ratio: float = 0.01,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float64,
    precision: torch.dtype = torch.float32,
) -> tuple[DiagGmm, EmReport]:
    """A diagonal GMM of `num_components` trained on frames `x` (T, D) from one Gaussian up,
    doubling the number of components between rounds of EM."""
    x = torch.as_tensor(np.asarray(x) if not isinstance(x, Tensor) else x).to(device=device, dtype=dtype)
    if x.shape[0] < 2 * num_components:
        raise ValueError(f"{x.shape[0]} frames are too few to train {num_components} Gaussians")
    floor = variance_floor(x, var_floor_ratio)
    gmm = single_gaussian(x, floor, precision)
    report = EmReport()
    while gmm.num_components < num_components:
        gmm = split(gmm, min(2 * gmm.num_components, num_components))
        gmm = em(gmm, x, iters_per_split, floor, report)
    gmm = em(gmm, x, final_iters, floor, report)
    log.info(
        "GMM: %d components, %d frames of dim %d, log-likelihood per frame %.3f -> %.3f",
        gmm.num_components,
        x.shape[0],
        x.shape[1],
        report.loglike_per_frame[0],
        report.loglike_per_frame[-1],
    )
    return gmm, report
