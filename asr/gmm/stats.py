"""EM statistics of a diagonal-GMM acoustic model on aligned frames, and the update from them.

What Kaldi's gmm-acc-stats-ali accumulates (per Gaussian: occupancy, first- and second-order
sums of its posterior-weighted frames; per transition id: its count) is computed here with
numpy, one matrix product per pdf over all of a job's frames aligned to it, instead of a call
per frame: each frame's Gaussian log-likelihoods are Kaldi's DiagGmm::LogLikelihoods,
gconst + x . (mu/var) - 1/2 x^2 . (1/var). The update is Kaldi's own (MleDiagGmmUpdate per pdf
through the bindings: minimum occupancy, variance floor, removal of weak Gaussians), then the
transition model's MleUpdate, then mixing up (SplitByCount), as gmm-est does.
"""

from __future__ import annotations

from dataclasses import dataclass

import _kaldi_hmm_gmm  # mle_diag_gmm_update, which the package does not re-export
import kaldi_hmm_gmm as khg
import numpy as np


@dataclass
class ModelArrays:
    """An AmDiagGmm's parameters as numpy arrays, Gaussians of all pdfs stacked."""

    offsets: np.ndarray  # pdf p's Gaussians are rows offsets[p]:offsets[p+1]
    gconsts: np.ndarray  # (G,)
    means_invvars: np.ndarray  # (G, D)
    inv_vars: np.ndarray  # (G, D)

    @classmethod
    def of(cls, am: khg.AmDiagGmm) -> "ModelArrays":
        pdfs = [am.get_pdf(p) for p in range(am.num_pdfs)]
        for gmm in pdfs:
            if not gmm.valid_gconsts:
                gmm.compute_gconsts()
        counts = [gmm.num_gauss for gmm in pdfs]
        return cls(
            np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            np.concatenate([np.asarray(g.gconsts, np.float64) for g in pdfs]),
            np.concatenate([np.asarray(g.means_invvars, np.float64) for g in pdfs]),
            np.concatenate([np.asarray(g.inv_vars, np.float64) for g in pdfs]),
        )

    @property
    def num_gauss(self) -> int:
        return int(self.offsets[-1])


@dataclass
class Stats:
    """Sufficient statistics of one or more jobs (they add)."""

    occupancy: np.ndarray  # (G,) float64
    sum_x: np.ndarray  # (G, D)
    sum_x2: np.ndarray  # (G, D)
    transitions: np.ndarray  # (num_transition_ids + 1,) counts, as TransitionModel::Accumulate
    log_like: float = 0.0
    frames: int = 0

    @classmethod
    def zeros(cls, num_gauss: int, dim: int, num_transition_ids: int) -> "Stats":
        return cls(
            np.zeros(num_gauss),
            np.zeros((num_gauss, dim)),
            np.zeros((num_gauss, dim)),
            np.zeros(num_transition_ids + 1),
        )

    def add(self, other: "Stats") -> None:
        self.occupancy += other.occupancy
        self.sum_x += other.sum_x
        self.sum_x2 += other.sum_x2
        self.transitions += other.transitions
        self.log_like += other.log_like
        self.frames += other.frames


def gaussian_log_likelihoods(model: ModelArrays, pdf: int, feats: np.ndarray) -> np.ndarray:
    """(T, pdf's Gaussians): Kaldi's DiagGmm::LogLikelihoods of each frame (float64)."""
    rows = slice(model.offsets[pdf], model.offsets[pdf + 1])
    return (
        model.gconsts[rows][None, :]
        + feats @ model.means_invvars[rows].T
        - 0.5 * (feats * feats) @ model.inv_vars[rows].T
    )


def accumulate(
    model: ModelArrays,
    stats: Stats,
    feats: np.ndarray,
    pdfs: np.ndarray,
    tids: np.ndarray,
    stat_feats: np.ndarray | None = None,
    weights: FrameWeights | None = None,
) -> None:
    """Add the statistics of frames `feats` (T, D) aligned to `pdfs` (and transition ids `tids`).

    `stat_feats`: the Gaussians' posteriors come from `feats`, their sums from these frames
    instead (gmm-acc-stats-twofeats: a SAT system's speaker-independent alignment model).
    `weights`: filled with each frame's posterior-weighted inverse variances and scaled means
    (what MLLT and fMLLR accumulate)."""
    feats = feats.astype(np.float64)
    summed = feats if stat_feats is None else stat_feats.astype(np.float64)
    stats.transitions += np.bincount(tids, minlength=len(stats.transitions))[: len(stats.transitions)]
    stats.frames += len(pdfs)
    order = np.argsort(pdfs, kind="stable")
    sorted_pdfs = pdfs[order]
    bounds = np.flatnonzero(np.diff(sorted_pdfs)) + 1
    for block in np.split(order, bounds):
        if not len(block):
            continue
        pdf = int(pdfs[block[0]])
        x = feats[block]
        loglikes = gaussian_log_likelihoods(model, pdf, x)
        top = loglikes.max(axis=1)
        frame_like = top + np.log(np.exp(loglikes - top[:, None]).sum(axis=1))
        posteriors = np.exp(loglikes - frame_like[:, None])
        rows = slice(model.offsets[pdf], model.offsets[pdf + 1])
        s = summed[block]
        stats.occupancy[rows] += posteriors.sum(axis=0)
        stats.sum_x[rows] += posteriors.T @ s
        stats.sum_x2[rows] += posteriors.T @ (s * s)
        stats.log_like += float(frame_like.sum())
        if weights is not None:
            weights.inv_vars[block] = posteriors @ model.inv_vars[rows]
            weights.means_invvars[block] = posteriors @ model.means_invvars[rows]


@dataclass
class FrameWeights:
    """Per frame, sum_m gamma_tm / var_m and sum_m gamma_tm mu_m / var_m over its pdf's
    Gaussians m: the frame's part of the MLLT and fMLLR statistics."""

    inv_vars: np.ndarray  # (T, D)
    means_invvars: np.ndarray  # (T, D)

    @classmethod
    def empty(cls, frames: int, dim: int) -> "FrameWeights":
        return cls(np.zeros((frames, dim)), np.zeros((frames, dim)))


@dataclass
class UpdateResult:
    gmm_objf_change: float  # per frame, as gmm-est logs it
    transition_objf_change: float
    frames: float
    num_gauss: int


def update(
    am: khg.AmDiagGmm,
    tm: khg.TransitionModel,
    stats: Stats,
    model: ModelArrays,
    min_gaussian_occupancy: float = 10.0,
    min_variance: float = 0.001,
    mixup_to: int = 0,
    power: float = 0.2,
    perturb_factor: float = 0.01,
    min_count: float = 20.0,
    flags: str = "mvwt",
    remove_low_count: bool = True,
) -> UpdateResult:
    """gmm-est: ML update of every pdf (Kaldi's MleDiagGmmUpdate), of the transition
    probabilities, then mixing up to `mixup_to` Gaussians in all (0: no change). `flags`:
    gmm-est's --update-flags (m means, v variances, w weights, t transitions); `remove_low_count`:
    its --remove-low-count-gaussians."""
    gmm_flags = khg.str_to_gmm_flags(flags.replace("t", ""))
    opts = khg.MleDiagGmmOptions(min_gaussian_occupancy=min_gaussian_occupancy, min_variance=min_variance)
    opts.remove_low_count_gaussians = remove_low_count
    gmm_change, pdf_occupancy = 0.0, np.zeros(am.num_pdfs)
    for pdf in range(am.num_pdfs):
        rows = slice(model.offsets[pdf], model.offsets[pdf + 1])
        gmm = am.get_pdf(pdf)
        acc = khg.AccumDiagGmm(gmm, gmm_flags)
        acc.occupancy = stats.occupancy[rows]
        acc.mean_accumulator = stats.sum_x[rows]
        acc.variance_accumulator = stats.sum_x2[rows]
        pdf_occupancy[pdf] = stats.occupancy[rows].sum()
        if pdf_occupancy[pdf] > 0:
            change, *_ = _kaldi_hmm_gmm.mle_diag_gmm_update(config=opts, diag_gmm_acc=acc, flags=gmm_flags, gmm=gmm)
            gmm_change += change
    transition_change, count = 0.0, 1.0
    if "t" in flags:
        transition_change, count = tm.mle_update(stats.transitions.astype(np.float64), khg.MleTransitionUpdateConfig())
    if mixup_to > am.num_gauss:
        am.split_by_count(
            state_occs=pdf_occupancy.astype(np.float32),
            target_components=mixup_to,
            perturb_factor=perturb_factor,
            power=power,
            min_count=min_count,
        )
    am.compute_gconsts()
    frames = max(stats.frames, 1)
    return UpdateResult(gmm_change / frames, transition_change / max(count, 1.0), float(stats.frames), am.num_gauss)
