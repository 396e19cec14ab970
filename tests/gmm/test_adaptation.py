"""The LDA+MLLT and SAT systems' statistics on aligned frames (asr/gmm/adaptation.py) against
closed forms and the UBM-based reference estimators, on synthetic Gaussian data."""

import kaldi_hmm_gmm as khg
import numpy as np
import scipy.linalg
import torch

from asr.features.fmllr.transform import accumulate as ubm_fmllr_accumulate
from asr.features.fmllr.update import identity_transform
from asr.features.gmm import DiagGmm
from asr.features.lda_mllt_update import estimate_lda, mllt_aux, update_mllt
from asr.gmm.adaptation import (
    MlltAccs,
    add_lda_frames,
    estimate_transforms,
    merge_lda,
    mllt_frames_term,
    mllt_stats,
    speaker_accs,
)
from asr.gmm.stats import FrameWeights, ModelArrays, Stats, accumulate
from asr.kaldi.matrix import apply_transform


def acoustic_model(means: np.ndarray, variances: np.ndarray, gaussians_per_pdf: int) -> khg.AmDiagGmm:
    """An AmDiagGmm whose pdf p has the Gaussians p*k .. p*k+k-1 of (means, variances), equal weights."""
    am = khg.AmDiagGmm()
    for start in range(0, len(means), gaussians_per_pdf):
        rows = slice(start, start + gaussians_per_pdf)
        gmm = khg.DiagGmm(nmix=gaussians_per_pdf, dim=means.shape[1])
        gmm.set_weights(np.full(gaussians_per_pdf, 1.0 / gaussians_per_pdf, np.float32))
        gmm.set_invvars_and_means((1.0 / variances[rows]).astype(np.float32), means[rows].astype(np.float32))
        gmm.compute_gconsts()
        am.add_pdf(gmm)
    return am


def sample(means, variances, gaussians_per_pdf, frames, rng):
    """Frames drawn from the model's Gaussians, with the pdf each came from."""
    gauss = rng.integers(0, len(means), frames)
    x = means[gauss] + rng.normal(size=(frames, means.shape[1])) * np.sqrt(variances[gauss])
    return x, gauss // gaussians_per_pdf


def gathered(model: ModelArrays, x: np.ndarray, pdfs: np.ndarray) -> tuple[Stats, FrameWeights]:
    stats = Stats.zeros(model.num_gauss, x.shape[1], 1)
    weights = FrameWeights.empty(len(x), x.shape[1])
    accumulate(model, stats, x, pdfs, np.zeros(len(x), np.int64), None, weights)
    return stats, weights


def test_lda_on_tied_states_is_the_generalised_eigenproblem_of_their_scatters():
    rng = np.random.default_rng(0)
    classes, dim, frames = 6, 9, 6000
    means = rng.normal(0, 3, (classes, dim))
    labels = rng.integers(0, classes, frames)
    x = means[labels] + rng.normal(size=(frames, dim)) @ rng.normal(size=(dim, dim)) * 0.5
    half = frames // 2  # two jobs' statistics, summed
    stats = merge_lda(
        [add_lda_frames(None, labels[:half], x[:half], classes), add_lda_frames(None, labels[half:], x[half:], classes)]
    )
    matrix, values = estimate_lda(stats, 3)

    mean = x.mean(axis=0)
    class_means = np.stack([x[labels == c].mean(axis=0) for c in range(classes)])
    counts = np.bincount(labels, minlength=classes)
    within = sum(((x[labels == c] - class_means[c]).T @ (x[labels == c] - class_means[c])) for c in range(classes))
    within /= frames
    between = (counts[:, None] * (class_means - mean)).T @ (class_means - mean) / frames
    reference = scipy.linalg.eigh(between, within, eigvals_only=True)[::-1]
    np.testing.assert_allclose(values[:3], reference[:3], rtol=1e-4)
    # W S_w W^T = I and W S_b W^T = diag(eigenvalues): the projection whitens the within-class scatter
    np.testing.assert_allclose(matrix @ within @ matrix.T, np.eye(3), atol=1e-4)
    np.testing.assert_allclose(matrix @ between @ matrix.T, np.diag(reference[:3]), atol=1e-3 * reference[0])


def test_mllt_statistics_equal_the_per_gaussian_sum():
    """G_i = sum_t sum_m gamma_tm / var_mi (x_t - mu_m)(x_t - mu_m)^T, computed directly."""
    rng = np.random.default_rng(1)
    dim, k = 4, 3
    means, variances = rng.normal(0, 2, (6, dim)), rng.uniform(0.5, 2.0, (6, dim))
    model = ModelArrays.of(acoustic_model(means, variances, k))
    x, pdfs = sample(means, variances, k, 500, rng)
    stats, weights = gathered(model, x, pdfs)
    got = mllt_stats(MlltAccs(mllt_frames_term(weights, x), stats), model)

    expected = np.zeros((dim, dim, dim))
    inv_vars, mu = model.inv_vars, model.means_invvars / model.inv_vars
    for t in range(len(x)):
        rows = slice(model.offsets[pdfs[t]], model.offsets[pdfs[t] + 1])
        ll = model.gconsts[rows] + model.means_invvars[rows] @ x[t] - 0.5 * inv_vars[rows] @ (x[t] ** 2)
        gamma = np.exp(ll - ll.max())
        gamma /= gamma.sum()
        for g, m in zip(gamma, range(rows.start, rows.stop)):
            d = x[t] - mu[m]
            expected += g * inv_vars[m][:, None, None] * np.outer(d, d)[None]
    np.testing.assert_allclose(got.G, expected, rtol=1e-6, atol=1e-6)
    assert abs(got.beta - len(x)) < 1e-6


def test_mllt_undoes_a_rotation_and_its_auxiliary_function_rises_every_row():
    """Frames of diagonal Gaussians, rotated: MLLT's transform times the rotation is a scaled permutation."""
    rng = np.random.default_rng(2)
    dim, k = 3, 2
    means, variances = rng.normal(0, 2, (8, dim)), rng.uniform(0.2, 3.0, (8, dim))
    x, pdfs = sample(means, variances, k, 20000, rng)
    rotation = np.linalg.qr(rng.normal(size=(dim, dim)))[0]
    rotated = x @ rotation.T
    transform = np.eye(dim)
    for _ in range(4):  # MLLT alternated with the model's update, as in training
        z = rotated @ transform.T
        total = transform @ rotation  # the model in z's space: the true means, each covariance's diagonal
        gauss_vars = np.stack([np.diag(total @ np.diag(v) @ total.T) for v in variances])
        model = ModelArrays.of(acoustic_model(means @ total.T, gauss_vars, k))
        stats, weights = gathered(model, z, pdfs)
        mllt = mllt_stats(MlltAccs(mllt_frames_term(weights, z), stats), model)
        trace: list[float] = []
        step = update_mllt(mllt, passes=20, trace=trace)
        assert all(b >= a - 1e-6 * abs(a) for a, b in zip(trace, trace[1:]))
        assert trace[-1] >= mllt_aux(np.eye(dim), mllt) - 1e-6
        transform = step @ transform
    product = transform @ rotation
    dominance = np.abs(product).max(axis=1) / np.linalg.norm(product, axis=1)
    assert dominance.min() > 0.995, product


def test_speaker_statistics_are_the_ubm_estimators_for_a_one_pdf_model():
    """With one pdf (a UBM), a speaker's statistics are asr.features.fmllr's, the reference."""
    rng = np.random.default_rng(3)
    dim = 5
    means, variances = rng.normal(0, 2, (4, dim)), rng.uniform(0.5, 2.0, (4, dim))
    am = acoustic_model(means, variances, 4)
    model = ModelArrays.of(am)
    x, pdfs = sample(means, variances, 4, 800, rng)
    _, weights = gathered(model, x, pdfs)
    ours = speaker_accs(weights, x, np.ones(len(x))).stats()
    ubm = DiagGmm(
        torch.full((4,), 0.25, dtype=torch.float64),
        torch.as_tensor(means, dtype=torch.float64),
        torch.as_tensor(variances.astype(np.float32).astype(np.float64)),
        precision=torch.float64,
    )
    reference, _ = ubm_fmllr_accumulate(ubm, torch.as_tensor(x), identity_transform(dim))
    assert abs(ours.beta - reference.beta) < 1e-6
    np.testing.assert_allclose(ours.K, reference.K, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ours.G, reference.G, rtol=1e-4, atol=1e-6)


def test_sat_fmllr_recovers_a_known_affine_distortion_of_a_speaker():
    rng = np.random.default_rng(4)
    dim, k = 4, 2
    means, variances = rng.normal(0, 3, (12, dim)), rng.uniform(0.3, 1.5, (12, dim))
    model = ModelArrays.of(acoustic_model(means, variances, k))
    clean, pdfs = sample(means, variances, k, 6000, rng)
    A = np.eye(dim) + 0.3 * rng.normal(size=(dim, dim))
    b = rng.normal(0, 1, dim)
    distorted = clean @ A.T + b  # the speaker's frames; fMLLR should map them back
    silence = np.zeros(len(clean))
    silence[:500] = 1  # frames weighted 0 do not count
    current: dict = {}
    for _ in range(6):  # EM: posteriors on the currently adapted frames
        adapted = apply_transform(distorted, current["spk"]) if current else distorted
        _, weights = gathered(model, adapted, pdfs)
        accs = {"spk": speaker_accs(weights, distorted, 1.0 - silence)}
        assert abs(accs["spk"].beta - 5500) < 1e-6
        current = estimate_transforms(accs, current, dim).transforms
    inverse = np.linalg.inv(A)
    np.testing.assert_allclose(current["spk"][:, :dim], inverse, atol=0.05)
    np.testing.assert_allclose(current["spk"][:, dim], -inverse @ b, atol=0.1)


def test_a_speaker_with_too_few_frames_keeps_its_transform():
    rng = np.random.default_rng(5)
    dim = 3
    means, variances = rng.normal(0, 2, (2, dim)), np.ones((2, dim))
    model = ModelArrays.of(acoustic_model(means, variances, 1))
    x, pdfs = sample(means, variances, 1, 100, rng)
    _, weights = gathered(model, x, pdfs)
    kept = np.hstack([2 * np.eye(dim), np.ones((dim, 1))])
    out = estimate_transforms({"a": speaker_accs(weights, x, np.ones(100))}, {"a": kept, "b": kept}, dim)
    assert out.updated == 0
    np.testing.assert_array_equal(out.transforms["a"], kept)
    np.testing.assert_array_equal(out.transforms["b"], kept)
