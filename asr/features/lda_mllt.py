"""The LDA+MLLT front end of a GMM system, estimated without transcripts.

Kaldi's `steps/train_lda_mllt.sh` splices frames (+-3), projects them with LDA whose classes
are the tied states of a forced alignment, and then estimates MLLT (a semi-tied covariance,
Gales 1999) so diagonal Gaussians fit the projected features. Without alignments the
classes here are the components of a UBM trained on the unspliced frames, with soft
(posterior) class membership; everything else is as in Kaldi (the estimators, from their
statistics: asr/features/lda_mllt_update.py), MLLT alternated with EM on the GMM in the
rotated space.

The front end is the single matrix T_mllt @ W_lda (d x spliced dim), saved as a Kaldi matrix
(`final.mat`, what `transform-feats` applies after `splice-feats`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import torch
from torch import Tensor

from asr.features import gmm as gmm_lib
from asr.features.gmm import CHUNK_FRAMES, OUTER_PRODUCT_CHUNK, DiagGmm, GmmStats
from asr.features.lda_mllt_update import LdaStats, MlltStats, estimate_lda, update_mllt
from asr.utils.memory import release_freed_memory

log = logging.getLogger("asr.features")


# --------------------------------------------------------------------------- LDA


def accumulate_lda(class_posteriors: Tensor, x: Tensor, stats: LdaStats | None = None) -> LdaStats:
    """Add frames `x` (T, K) with soft class memberships (T, M) to the statistics (float64),
    OUTER_PRODUCT_CHUNK frames at a time: float64 copies of a whole block of spliced frames and
    their posteriors took 140 MB at the peak of the fMLLR model's training."""
    classes, dim = class_posteriors.shape[1], x.shape[1]
    sums = [
        class_posteriors.new_zeros(shape, dtype=torch.float64)
        for shape in ((classes,), (classes, dim), (dim, dim), (dim,))
    ]
    for posteriors, frames in zip(class_posteriors.split(OUTER_PRODUCT_CHUNK), x.split(OUTER_PRODUCT_CHUNK)):
        posteriors = posteriors.double()
        frames = frames.to(posteriors)
        for total, part in zip(
            sums, (posteriors.sum(dim=0), posteriors.T @ frames, frames.T @ frames, frames.sum(dim=0))
        ):
            total += part
    added = LdaStats(*(total.cpu().numpy() for total in sums))
    if stats is None:
        return added
    stats.add(added)
    return stats


# -------------------------------------------------------------------------- MLLT


def accumulate_mllt(gmm: DiagGmm, z: Tensor) -> tuple[MlltStats, GmmStats]:
    """MLLT statistics of frames `z` (T, d) under the GMM (and the GMM's own EM statistics).

    G_i = sum_t g_ti z z^T - sum_m (F_m mu_m^T + mu_m F_m^T) / var_mi + sum_m n_m mu_m mu_m^T / var_mi
    with g_ti = sum_m gamma_tm / var_mi and F_m = sum_t gamma_tm z_t, so only the first term
    touches every frame.
    """
    d = gmm.dim
    inv_vars = 1.0 / gmm.variances
    G = gmm.means.new_zeros(d, d * d)
    stats = GmmStats.zeros(gmm)
    for chunk in z.split(OUTER_PRODUCT_CHUNK):
        chunk = chunk.to(gmm.means)
        posteriors, loglikes = gmm.posteriors(chunk)
        posteriors = posteriors.to(chunk.dtype)
        stats.add(posteriors, chunk, loglikes)
        G += (posteriors @ inv_vars).T @ (chunk[:, :, None] * chunk[:, None, :]).reshape(chunk.shape[0], -1)
    G = G.reshape(d, d, d)
    mu, F, n = gmm.means, stats.first, stats.occupancy
    cross = torch.einsum("mi,mj,mk->ijk", inv_vars, F, mu)
    G += -cross - cross.transpose(1, 2) + torch.einsum("mi,m,mj,mk->ijk", inv_vars, n, mu, mu)
    return MlltStats(float(n.sum()), G.cpu().numpy()), stats


# --------------------------------------------------------------------- front end


@dataclass
class FrontEnd:
    matrix: np.ndarray  # (d, K): MLLT @ LDA, applied to spliced frames
    gmm: DiagGmm  # in the front end's output space
    lda_eigenvalues: np.ndarray
    loglike_per_frame: list[float] = field(default_factory=list)  # of the GMM, per EM iteration


def train_front_end(
    base: Tensor,
    spliced: Iterable[Tensor | np.ndarray],
    dim: int,
    num_components: int,
    mllt_iters: int = 4,
    em_iters: int = 2,
    final_iters: int = 4,
    var_floor_ratio: float = 0.01,
) -> FrontEnd:
    """LDA (classes: a UBM's components on `base`), then MLLT alternated with EM.

    base: (T, D) frames the class UBM is trained on; spliced: the same frames spliced, (T, K)
    in blocks of CHUNK_FRAMES rows (asr.features.splice.SplicedBlocks, or a tensor's split),
    iterated twice, so that they need not be held whole.
    """
    class_ubm, _ = gmm_lib.train_gmm(base, num_components, var_floor_ratio=var_floor_ratio)
    lda_stats = None
    for frames, context in zip(base.split(CHUNK_FRAMES), spliced, strict=True):
        posteriors, _ = class_ubm.posteriors(frames.to(class_ubm.means))
        lda_stats = accumulate_lda(posteriors, torch.as_tensor(context), lda_stats)
    assert lda_stats is not None
    lda, eigenvalues = estimate_lda(lda_stats, dim)
    log.info(
        "LDA %d -> %d: eigenvalues %.2f .. %.2f (kept), %.3f (first dropped)",
        lda.shape[1],
        dim,
        eigenvalues[0],
        eigenvalues[dim - 1],
        eigenvalues[dim] if len(eigenvalues) > dim else float("nan"),
    )
    release_freed_memory()
    matrix = torch.as_tensor(lda, dtype=class_ubm.means.dtype, device=class_ubm.means.device)
    z = project(spliced, matrix, base.shape[0])
    floor = gmm_lib.variance_floor(z, var_floor_ratio)
    gmm = _gmm_from_class_posteriors(class_ubm, base, z, floor)
    report = gmm_lib.EmReport()
    for _ in range(mllt_iters):
        gmm = gmm_lib.em(gmm, z, em_iters, floor, report)
        stats, _ = accumulate_mllt(gmm, z)
        release_freed_memory()
        mllt = torch.as_tensor(update_mllt(stats), dtype=z.dtype, device=z.device)
        for part in z.split(OUTER_PRODUCT_CHUNK):  # in place: z @ mllt.T would hold z twice
            part.copy_(part @ mllt.T)
        matrix = mllt @ matrix
        gmm = DiagGmm(
            gmm.weights, gmm.means @ mllt.T, gmm.variances, gmm.precision
        )  # variances: re-estimated by EM next
        floor = gmm_lib.variance_floor(z, var_floor_ratio)
    gmm = gmm_lib.em(gmm, z, final_iters, floor, report)
    log.info(
        "LDA+MLLT GMM: log-likelihood per frame %.3f -> %.3f over %d EM iterations",
        report.loglike_per_frame[0],
        report.loglike_per_frame[-1],
        len(report.loglike_per_frame),
    )
    return FrontEnd(matrix.cpu().numpy(), gmm, eigenvalues, report.loglike_per_frame)


def project(spliced: Iterable[Tensor | np.ndarray], matrix: Tensor, frames: int) -> Tensor:
    """The spliced frames' projections (frames, d), written in place: a list of parts joined by
    torch.cat would hold them twice."""
    z = matrix.new_empty(frames, matrix.shape[0])
    start = 0
    for block in spliced:
        for part in torch.as_tensor(block).split(OUTER_PRODUCT_CHUNK):
            torch.matmul(part.to(matrix), matrix.T, out=z[start : start + part.shape[0]])
            start += part.shape[0]
    if start != frames:
        raise ValueError(f"{start} spliced frames for {frames} frames")
    return z


def _gmm_from_class_posteriors(class_ubm: DiagGmm, base: Tensor, z: Tensor, floor: Tensor) -> DiagGmm:
    """The projected space's GMM: one M-step with the class UBM's posteriors."""
    stats = GmmStats.zeros(
        DiagGmm(
            class_ubm.weights,
            z.new_zeros(class_ubm.num_components, z.shape[1]),
            z.new_ones(class_ubm.num_components, z.shape[1]),
        )
    )
    for frames, projected in zip(base.split(CHUNK_FRAMES), z.split(CHUNK_FRAMES)):
        posteriors, loglikes = class_ubm.posteriors(frames.to(class_ubm.means))
        stats.add(posteriors, projected, loglikes)
    start = DiagGmm(
        class_ubm.weights, z.new_zeros(stats.first.shape), z.new_ones(stats.first.shape), class_ubm.precision
    )
    return gmm_lib.maximize(start, stats, floor, min_occupancy=1e-3)
