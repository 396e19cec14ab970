"""i-vectors: the total-variability model, its EM training and i-vector extraction (Kaldi's
`ivector-extractor-acc-stats` / `-est`, `ivector-extract`, `ivector-extract-online2`).

Model. Given a UBM's posteriors gamma_tc (fixed, scaled by `posterior_scale`), the frames of a
session (a speaker, or an utterance) aligned to component c are N(M_c w, Sigma_c), with w the
session's i-vector, M_c (D x R) the projections and Sigma_c full covariances. The prior is
w ~ N(p e_0, I): the first dimension carries a fixed offset p = 100 and M_c's first column
starts as the UBM mean / p, so the zero-information i-vector [p, 0, ...] gives the UBM's
means (Kaldi's IvectorExtractor, without log-weight regression: --use-weights=false, as the
online and hybrid recipes have it). The posterior of w is Gaussian with precision
I + sum_c n_c M_c^T Sigma_c^-1 M_c and linear term p e_0 + sum_c M_c^T Sigma_c^-1 f_c, from the
session's zeroth and first order statistics n_c = sum_t gamma_tc, f_c = sum_t gamma_tc x_t.

Training (EM, every session's statistics fixed): the E-step gives each session's posterior
mean and variance; the M-step sets M_c = Y_c R_c^-1 (Y_c = sum_s f_sc E[w_s]^T, R_c =
sum_s n_sc E[w_s w_s^T]), Sigma_c from the second-order statistics (floored at 0.1 times the
average covariance), then re-estimates the prior as the i-vectors' mean and covariance and
transforms the i-vector space back to N(p' e_0, I), its dimensions sorted by how much they
explain. The objective, the log-likelihood of the statistics with w integrated out, never
decreases (`auxiliary`). Components with a total count below 100 keep their parameters.

Extraction. The i-vector is the posterior mean with p subtracted from its first dimension
(so it is about zero-mean). `max_count` caps the statistics' weight: past that count the
prior is scaled up instead (Kaldi's --max-count, 100 in the hybrid recipes' extraction),
so a speaker's i-vector from an hour and one from ten seconds look alike. Online, the i-vector
of frames [t, t + period) uses frames 0..t (`ivector-extract-online2`, every 10 frames; solved
exactly here, Kaldi uses 15 conjugate-gradient steps).

Everything is batched over sessions (or an utterance's periods) in torch, in float64.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from asr.kaldi.ivector import read_ivector_extractor, write_ivector_extractor
from asr.features.ivector.full_gmm import CHUNK_FRAMES, FullGmm, gselect
from asr.features.gmm import DiagGmm

PRIOR_OFFSET = 100.0  # Kaldi's IvectorExtractor: "hardwired for now"
IVECTOR_DIM = 100  # the online and hybrid recipes' --ivector-dim
NUM_GSELECT = 20  # components per frame chosen by the diagonal UBM (sid/train_ivector_extractor.sh)
MIN_POST = 0.025  # posteriors below this are pruned and the rest renormalised (--min-post)
POSTERIOR_SCALE = 0.1  # for the frames' correlation (--posterior-scale / --acoustic-weight)
MAX_COUNT = 100.0  # extraction: statistics above this count weigh as this count (--max-count)
GAUSSIAN_MIN_COUNT = 100.0  # IvectorExtractorEstimationOptions
VARIANCE_FLOOR_FACTOR = 0.1  # IvectorExtractorEstimationOptions
PERIOD = 10  # frames per online i-vector (--ivector-period)


# ------------------------------------------------------------------------ model


@dataclass
class IvectorExtractor:
    weights: Tensor  # (C,) the UBM's weights (they only enter the objective)
    projections: Tensor  # (C, D, R): M_c
    inv_covars: Tensor  # (C, D, D): Sigma_c^-1
    prior_offset: float = PRIOR_OFFSET
    _derived: tuple[Tensor, Tensor] | None = field(default=None, repr=False, compare=False)

    @property
    def num_components(self) -> int:
        return int(self.projections.shape[0])

    @property
    def feat_dim(self) -> int:
        return int(self.projections.shape[1])

    @property
    def ivector_dim(self) -> int:
        return int(self.projections.shape[2])

    @classmethod
    def init_from_ubm(cls, ubm: FullGmm, ivector_dim: int = IVECTOR_DIM, seed: int = 0) -> "IvectorExtractor":
        """ivector-extractor-init: random projections whose first column gives the UBM's means."""
        if ivector_dim < 1:
            raise ValueError(f"i-vector dimension {ivector_dim} must be positive")
        generator = torch.Generator().manual_seed(seed)
        c, d = ubm.num_components, ubm.dim
        projections = torch.randn(c, d, ivector_dim, generator=generator, dtype=torch.float64).to(ubm.means.device)
        projections[:, :, 0] = ubm.means.double() / PRIOR_OFFSET
        return cls(ubm.weights.double(), projections, torch.linalg.inv(ubm.covariances.double()), PRIOR_OFFSET)

    def to(self, device: torch.device | str) -> "IvectorExtractor":
        return IvectorExtractor(
            *(t.to(device) for t in (self.weights, self.projections, self.inv_covars)), self.prior_offset
        )

    def derived(self) -> tuple[Tensor, Tensor]:
        """(U, Sigma^-1 M): U_c = M_c^T Sigma_c^-1 M_c (C, R, R) and Sigma_c^-1 M_c (C, D, R)."""
        if self._derived is None:
            inv_m = self.inv_covars @ self.projections
            self._derived = (self.projections.transpose(1, 2) @ inv_m, inv_m)
        return self._derived

    def gconsts(self) -> Tensor:
        """-1/2 (log|Sigma_c| + D log 2 pi), per component."""
        return 0.5 * torch.linalg.slogdet(self.inv_covars)[1] - 0.5 * self.feat_dim * math.log(2 * math.pi)

    def save(self, path: str | os.PathLike) -> None:
        write_ivector_extractor(
            path,
            *(t.detach().cpu().double().numpy() for t in (self.weights, self.projections, self.inv_covars)),
            self.prior_offset,
        )

    @classmethod
    def load(cls, path: str | os.PathLike, device: torch.device | str = "cpu") -> "IvectorExtractor":
        weights, projections, inv_covars, offset = read_ivector_extractor(path)
        return cls(*(torch.from_numpy(a).to(device) for a in (weights, projections, inv_covars)), offset)


# ------------------------------------------------------------------ posteriors


@dataclass
class Ubm:
    """The diagonal UBM (Gaussian selection) and the full UBM (posteriors) of an extractor."""

    diag: DiagGmm
    full: FullGmm
    num_gselect: int = NUM_GSELECT
    min_post: float = MIN_POST
    posterior_scale: float = POSTERIOR_SCALE

    def posteriors(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Each frame's components (T, k) and their posteriors, pruned below `min_post`,
        renormalised, then scaled by `posterior_scale` (T, k); pruned entries weigh 0."""
        x = x.to(self.full.means)
        indices, weights = [], []
        for chunk in x.split(CHUNK_FRAMES):
            selection = gselect(self.diag, chunk, self.num_gselect)
            posteriors, _ = self.full.posteriors(chunk, selection)
            best = posteriors.max(dim=1, keepdim=True).values
            kept = torch.where((posteriors >= self.min_post) | (posteriors == best), posteriors, 0.0)
            indices.append(selection)
            weights.append(kept / kept.sum(dim=1, keepdim=True) * self.posterior_scale)
        if not indices:
            return x.new_zeros(0, 1, dtype=torch.long), x.new_zeros(0, 1)
        return torch.cat(indices), torch.cat(weights)


def _nonzero(indices: Tensor, weights: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The (frame, component, weight) triples of the posteriors that are not pruned (about 2
    of the 20 selected per frame): the statistics touch only those."""
    frames = torch.arange(indices.shape[0], device=indices.device).repeat_interleave(indices.shape[1])
    components, flat = indices.reshape(-1), weights.reshape(-1)
    kept = flat != 0
    return frames[kept], components[kept], flat[kept]


def zeroth_first_order(
    x: Tensor, indices: Tensor, weights: Tensor, num_components: int, groups: Tensor | None = None, num_groups: int = 1
) -> tuple[Tensor, Tensor]:
    """Counts (G, C) and first-order statistics (G, C, D) of frames `x` (T, D) with sparse
    posteriors (T, k); frame t belongs to group groups[t] (all to group 0 by default)."""
    frames, components, gamma = _nonzero(indices, weights)
    rows = components if groups is None else components + groups[frames] * num_components
    counts = weights.new_zeros(num_groups * num_components).index_add_(0, rows, gamma)
    first = weights.new_zeros(num_groups * num_components, x.shape[1])
    first.index_add_(0, rows, x.to(weights)[frames] * gamma[:, None])
    return counts.reshape(num_groups, num_components), first.reshape(num_groups, num_components, x.shape[1])


def second_order(x: Tensor, indices: Tensor, weights: Tensor, num_components: int) -> Tensor:
    """sum_t gamma_tc x_t x_t^T per component (C, D, D), for the covariance update."""
    d = x.shape[1]
    out = weights.new_zeros(num_components, d, d)
    frames, components, gamma = _nonzero(indices, weights)
    x = x.to(weights)
    order = torch.argsort(components, stable=True)
    start = 0
    for component, count in enumerate(torch.bincount(components, minlength=num_components).tolist()):
        if count:
            pairs = order[start : start + count]
            frame = x[frames[pairs]]
            out[component] += (frame * gamma[pairs, None]).T @ frame
            start += count
    return out


# -------------------------------------------------------------------- E-step


@dataclass
class Posterior:
    """Each session's i-vector posterior: mean (S, R) and, when asked, variance (S, R, R)."""

    mean: Tensor
    variance: Tensor | None = None


def posterior(
    extractor: IvectorExtractor,
    counts: Tensor,
    first: Tensor,
    prior_scale: Tensor | None = None,
    with_variance: bool = False,
) -> Posterior:
    """The i-vector posterior of every session from its statistics (S, C) and (S, C, D).

    prior_scale (S,): the prior's weight per session (1 without --max-count)."""
    u, inv_m = extractor.derived()
    s, c, d = first.shape
    r = extractor.ivector_dim
    linear = first.reshape(s, c * d) @ inv_m.reshape(c * d, r)
    quadratic = (counts @ u.reshape(c, r * r)).reshape(s, r, r)
    scale = torch.ones(s, dtype=linear.dtype, device=linear.device) if prior_scale is None else prior_scale.to(linear)
    linear[:, 0] += extractor.prior_offset * scale
    quadratic = quadratic + scale[:, None, None] * torch.eye(r, dtype=linear.dtype, device=linear.device)
    factor = torch.linalg.cholesky(0.5 * (quadratic + quadratic.transpose(1, 2)))
    mean = torch.cholesky_solve(linear[:, :, None], factor)[:, :, 0]
    return Posterior(mean, torch.cholesky_inverse(factor) if with_variance else None)


def prior_scales(counts: Tensor, max_count: float) -> Tensor | None:
    """--max-count as a prior weight: max(count, max_count) / max_count per session."""
    if max_count <= 0:
        return None
    return counts.sum(dim=1).clamp(min=max_count) / max_count


def extract(extractor: IvectorExtractor, counts: Tensor, first: Tensor, max_count: float = MAX_COUNT) -> Tensor:
    """One i-vector per session (S, R), the prior offset subtracted from the first dimension."""
    ivectors = posterior(extractor, counts, first, prior_scales(counts, max_count)).mean
    ivectors[:, 0] -= extractor.prior_offset
    return ivectors


def extract_online(
    extractor: IvectorExtractor,
    x: Tensor,
    indices: Tensor,
    weights: Tensor,
    period: int = PERIOD,
    max_count: float = MAX_COUNT,
) -> Tensor:
    """An utterance's online i-vectors (ceil(T / period), R): row i from frames 0..i * period."""
    frames = x.shape[0]
    if frames == 0:
        return x.new_zeros(0, extractor.ivector_dim, dtype=torch.float64)
    # Row i is estimated at frame i * period from frames 0..i * period: frame t enters at row
    # ceil(t / period); frames after the last row's frame enter none.
    num_rows = (frames + period - 1) // period
    used = (num_rows - 1) * period + 1
    x, indices, weights = x[:used], indices[:used], weights[:used]
    rows = (torch.arange(used, device=x.device) + period - 1) // period
    counts, first = zeroth_first_order(x, indices, weights, extractor.num_components, rows, num_rows)
    return extract(extractor, counts.cumsum(dim=0), first.cumsum(dim=0), max_count)


# -------------------------------------------------------------------- training


@dataclass
class TrainingStats:
    """Every training session's zeroth and first order statistics and the second-order
    statistics summed over sessions (posteriors fixed over the EM iterations, as Kaldi's)."""

    counts: Tensor  # (S, C)
    first: Tensor  # (S, C, D)
    second: Tensor  # (C, D, D)

    @property
    def frames(self) -> float:
        return float(self.counts.sum())


def auxiliary(extractor: IvectorExtractor, stats: TrainingStats, post: Posterior) -> float:
    """The EM objective at the E-step (Kaldi's GetAuxf summed over sessions): expected
    log-likelihood of the statistics minus the KL divergence of the posterior from the prior,
    i.e. the log-likelihood with w integrated out when `post` is the exact posterior."""
    u, inv_m = extractor.derived()
    s, c, d = stats.first.shape
    r = extractor.ivector_dim
    gamma = stats.counts.sum(dim=0)
    constant = float(gamma @ (extractor.weights.log() + extractor.gconsts()))
    constant -= 0.5 * float((stats.second * extractor.inv_covars).sum())
    linear = stats.first.reshape(s, c * d) @ inv_m.reshape(c * d, r)
    quadratic = (stats.counts @ u.reshape(c, r * r)).reshape(s, r, r)
    scatter = post.variance + post.mean[:, :, None] * post.mean[:, None, :]
    acoustic = (post.mean * linear).sum() - 0.5 * (quadratic * scatter).sum()
    offset = post.mean.clone()
    offset[:, 0] -= extractor.prior_offset
    prior = -0.5 * (
        (offset * offset).sum()
        + post.variance.diagonal(dim1=1, dim2=2).sum()
        - s * r
        - torch.linalg.slogdet(post.variance)[1].sum()
    )
    return constant + float(acoustic) + float(prior)


@dataclass
class EmIteration:
    auxiliary_per_frame: float  # at the E-step, before this iteration's update
    floored_eigenvalues: int  # covariance eigenvalues raised to the floor
    skipped_components: int  # below the minimum count: parameters kept


def em_iteration(
    extractor: IvectorExtractor,
    stats: TrainingStats,
    min_count: float = GAUSSIAN_MIN_COUNT,
    floor_factor: float = VARIANCE_FLOOR_FACTOR,
) -> tuple[IvectorExtractor, EmIteration]:
    """One E-step and M-step (ivector-extractor-acc-stats then ivector-extractor-est)."""
    post = posterior(extractor, stats.counts, stats.first, with_variance=True)
    aux = auxiliary(extractor, stats, post)
    s, c, d = stats.first.shape
    r = extractor.ivector_dim
    gamma = stats.counts.sum(dim=0)
    trained = gamma >= min_count
    y = (stats.first.reshape(s, c * d).T @ post.mean).reshape(c, d, r)
    scatter = (post.variance + post.mean[:, :, None] * post.mean[:, None, :]).reshape(s, r * r)
    rr = (stats.counts.T @ scatter).reshape(c, r, r)
    eye = torch.eye(r, dtype=rr.dtype, device=rr.device)
    rr = torch.where(trained[:, None, None], 0.5 * (rr + rr.transpose(1, 2)), eye)  # untrained: kept, not solved
    projections = torch.where(
        trained[:, None, None], torch.linalg.solve(rr, y.transpose(1, 2)).transpose(1, 2), extractor.projections
    )
    inv_covars, floored = _update_covariances(
        stats, y, rr, projections, gamma, trained, extractor.inv_covars, floor_factor
    )
    updated = IvectorExtractor(extractor.weights, projections, inv_covars, extractor.prior_offset)
    updated = update_prior(updated, post)
    return updated, EmIteration(aux / max(stats.frames, 1e-10), floored, int((~trained).sum()))


def _update_covariances(
    stats: TrainingStats,
    y: Tensor,
    rr: Tensor,
    projections: Tensor,
    gamma: Tensor,
    trained: Tensor,
    old_inv_covars: Tensor,
    floor_factor: float,
) -> tuple[Tensor, int]:
    """Sigma_c = (S_c - Y_c M_c^T - M_c Y_c^T + M_c R_c M_c^T) / gamma_c, floored at `floor_factor`
    times the count-weighted average covariance (in the sense of matrices: eigenvalues of
    floor^-1/2 Sigma floor^-1/2 raised to 1)."""
    if not bool(trained.any()):  # no component has min_count: no average to floor at, nothing to update
        return old_inv_covars, 0
    cross = y @ projections.transpose(1, 2)
    scatter = stats.second - cross - cross.transpose(1, 2) + projections @ rr @ projections.transpose(1, 2)
    scatter = 0.5 * (scatter + scatter.transpose(1, 2))
    floor = floor_factor * scatter[trained].sum(dim=0) / gamma[trained].sum()
    values, vectors = torch.linalg.eigh(floor)
    floor = (vectors * values.clamp(min=values.abs().max() * 1e-4)) @ vectors.T  # Kaldi: floor the floor too
    covariances = torch.where(trained[:, None, None], scatter / gamma.clamp(min=1e-10)[:, None, None], floor)
    whiten = torch.linalg.inv(torch.linalg.cholesky(floor))
    relative = whiten @ covariances @ whiten.T
    values, vectors = torch.linalg.eigh(0.5 * (relative + relative.transpose(1, 2)))
    floored = int(((values < 1.0) & trained[:, None]).sum())
    relative_inverse = (vectors / values.clamp(min=1.0)[:, None, :]) @ vectors.transpose(1, 2)
    inv_covars = whiten.T @ relative_inverse @ whiten
    return torch.where(trained[:, None, None], 0.5 * (inv_covars + inv_covars.transpose(1, 2)), old_inv_covars), floored


def update_prior(extractor: IvectorExtractor, post: Posterior) -> IvectorExtractor:
    """The prior's maximum-likelihood update, expressed by transforming the i-vector space
    (w -> V w, M_c -> M_c V^-1) so the prior stays N(p' e_0, I): V whitens the i-vectors'
    covariance, reflects their mean onto the first axis (a Householder reflection) and rotates
    the other axes to diagonalise the average of U_c (dimensions sorted by importance)."""
    mean = post.mean.mean(dim=0)
    covariance = (post.variance + post.mean[:, :, None] * post.mean[:, None, :]).mean(dim=0) - torch.outer(mean, mean)
    values, vectors = torch.linalg.eigh(0.5 * (covariance + covariance.T))
    whitening = vectors.T / values.clamp(min=1e-7).sqrt()[:, None]
    direction = whitening @ mean
    direction = direction / direction.norm()
    reflection = torch.eye(len(mean), dtype=mean.dtype, device=mean.device)
    if float(direction[0]) < 1.0 - 1e-12:  # I - 2 a a^T sends `direction` to e_0
        alpha = 1.0 / math.sqrt(2.0 * (1.0 - float(direction[0])))
        a = alpha * direction
        a[0] -= alpha
        reflection = reflection - 2.0 * torch.outer(a, a)
    transform = reflection @ whitening
    transform = _with_fixed_signs(_sort_by_importance(extractor, transform))
    projections = extractor.projections @ torch.linalg.inv(transform)
    return IvectorExtractor(extractor.weights, projections, extractor.inv_covars, float((transform @ mean)[0]))


def _with_fixed_signs(transform: Tensor) -> Tensor:
    """The transform with each row negated where needed so that its largest entry is positive.

    Dimensions 1.. come from eigenvectors, whose signs are arbitrary: LAPACK on the CPU and
    cuSOLVER on a GPU choose differently, and without this the same statistics would give
    i-vectors with some dimensions negated depending on the device. Row 0 maps the mean onto
    the positive first axis and keeps its sign."""
    largest = transform.abs().argmax(dim=1, keepdim=True)
    signs = torch.sign(transform.gather(1, largest))
    signs[0] = 1.0
    return transform * torch.where(signs == 0, torch.ones_like(signs), signs)


def _sort_by_importance(extractor: IvectorExtractor, transform: Tensor) -> Tensor:
    """Rotate dimensions 1.. of the transformed space so that the weighted average of the
    U_c there is diagonal, largest first (Kaldi's --diagonalize=true)."""
    u, _ = extractor.derived()
    inverse = torch.linalg.inv(transform)
    average = inverse.T @ torch.einsum("c,cij->ij", extractor.weights.to(u), u) @ inverse
    rest = average[1:, 1:]
    values, vectors = torch.linalg.eigh(0.5 * (rest + rest.T))
    rotation = torch.eye(len(transform), dtype=transform.dtype, device=transform.device)
    rotation[1:, 1:] = vectors[:, torch.argsort(values, descending=True)].T
    return rotation @ transform


def train_extractor(
    extractor: IvectorExtractor,
    stats: TrainingStats,
    iters: int = 10,
    min_count: float = GAUSSIAN_MIN_COUNT,
    floor_factor: float = VARIANCE_FLOOR_FACTOR,
    report: list[EmIteration] | None = None,
) -> IvectorExtractor:
    """`iters` EM iterations (Kaldi's train_ivector_extractor.sh: 10)."""
    for _ in range(iters):
        extractor, iteration = em_iteration(extractor, stats, min_count, floor_factor)
        if report is not None:
            report.append(iteration)
    return extractor


def final_auxiliary(extractor: IvectorExtractor, stats: TrainingStats) -> float:
    """The objective per frame of the trained model (the E-step of an iteration not taken)."""
    post = posterior(extractor, stats.counts, stats.first, with_variance=True)
    return auxiliary(extractor, stats, post) / max(stats.frames, 1e-10)


def cosine_scores(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of every row of `a` with every row of `b`."""
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return a @ b.T


def equal_error_rate(target: np.ndarray, nontarget: np.ndarray) -> float:
    """The error rate at the threshold where misses (targets scoring below it) and false
    alarms (non-targets at or above it) are equally frequent, interpolated between the two
    rates where they cross."""
    target, nontarget = np.sort(np.asarray(target, dtype=np.float64)), np.sort(np.asarray(nontarget, dtype=np.float64))
    if not len(target) or not len(nontarget):
        return float("nan")
    thresholds = np.unique(np.concatenate([target, nontarget, [np.inf]]))
    misses = np.searchsorted(target, thresholds, side="left") / len(target)
    false_alarms = 1.0 - np.searchsorted(nontarget, thresholds, side="left") / len(nontarget)
    i = int(np.argmax(misses >= false_alarms))  # misses rise, false alarms fall with the threshold
    if i == 0:
        return float((misses[0] + false_alarms[0]) / 2)
    # the two rates cross between thresholds i-1 and i: interpolate where they meet
    gap_before, gap_after = false_alarms[i - 1] - misses[i - 1], misses[i] - false_alarms[i]
    weight = gap_before / (gap_before + gap_after) if gap_before + gap_after > 0 else 0.5
    return float(misses[i - 1] + weight * (misses[i] - misses[i - 1]))


def speaker_eer(ivectors: np.ndarray, speakers: list[str]) -> float:
    """Equal error rate of cosine scoring over all pairs of rows: same speaker vs different."""
    scores = cosine_scores(ivectors, ivectors)
    labels = np.asarray(speakers)
    upper = np.triu_indices(len(labels), 1)
    same = (labels[:, None] == labels[None, :])[upper]
    return equal_error_rate(scores[upper][same], scores[upper][~same])
