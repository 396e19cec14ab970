"""Diagonal GMM (EM), LDA+MLLT and fMLLR: against references and their guarantees."""

import numpy as np
import pytest
import scipy.optimize
import scipy.stats
import torch

from asr.features.fmllr.transform import accumulate, estimate_fmllr, transform_frames
from asr.features.fmllr.update import aux_function, identity_transform, update_transform
from asr.features.gmm import CHUNK_FRAMES, DiagGmm, accumulate as gmm_accumulate, train_gmm
from asr.features.lda_mllt import accumulate_lda, accumulate_mllt, project, train_front_end
from asr.features.lda_mllt_update import estimate_lda, mllt_aux, update_mllt


class Mixture:
    """A known diagonal GMM to sample 'clean' frames from."""

    def __init__(self, dim: int, components: int, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.means = self.rng.normal(0, 2, (components, dim))
        self.vars = self.rng.uniform(0.3, 1.5, (components, dim))
        self.weights = self.rng.dirichlet(np.full(components, 5.0))

    def sample(self, n: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng([seed, 12345])
        c = rng.choice(len(self.weights), n, p=self.weights)
        return self.means[c] + rng.normal(size=(n, self.means.shape[1])) * np.sqrt(self.vars[c])

    def gmm(self) -> DiagGmm:
        return DiagGmm(*(torch.from_numpy(a) for a in (self.weights, self.means, self.vars)), precision=torch.float64)


@pytest.fixture(scope="module")
def mixture():
    return Mixture(dim=8, components=16)


@pytest.fixture(scope="module")
def trained(mixture):
    """Float64 E-step, so the guarantees (EM and fMLLR never decrease) hold to round-off."""
    return train_gmm(mixture.sample(8000, seed=1), 16, final_iters=20, precision=torch.float64)


# ----------------------------------------------------------------------------- GMM


def test_gmm_loglikelihood_matches_scipy(mixture):
    gmm, x = mixture.gmm(), mixture.sample(50, seed=2)
    reference = np.log(
        sum(
            w * scipy.stats.multivariate_normal(m, np.diag(v)).pdf(x)
            for w, m, v in zip(mixture.weights, mixture.means, mixture.vars)
        )
    )
    np.testing.assert_allclose(gmm.log_likelihood(torch.from_numpy(x)).numpy(), reference, rtol=1e-10)
    posteriors, _ = gmm.posteriors(torch.from_numpy(x))
    np.testing.assert_allclose(posteriors.sum(dim=1).numpy(), 1.0)


def test_em_never_decreases_and_fits_the_data(mixture, trained):
    gmm, report = trained
    ll = report.loglike_per_frame
    at_full_size = [loglike for loglike, m in zip(ll, report.components) if m == 16]
    assert all(b >= a - 1e-9 for a, b in zip(at_full_size, at_full_size[1:]))
    assert gmm.num_components == 16 and float(gmm.weights.sum()) == pytest.approx(1.0)
    held_out = torch.from_numpy(mixture.sample(4000, seed=3))
    true_ll = float(mixture.gmm().log_likelihood(held_out).mean())
    one_gaussian_ll = float(train_gmm(held_out, 1)[0].log_likelihood(held_out).mean())
    fitted_ll = float(gmm.log_likelihood(held_out).mean())
    assert true_ll - 0.5 < fitted_ll and fitted_ll > one_gaussian_ll + 1.0


# ----------------------------------------------------------------------------- fMLLR


def distort(x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A speaker's affine map: per-dimension scales 0.8-1.25, 10% cross-talk, an offset."""
    d = x.shape[1]
    a = np.diag(rng.uniform(0.8, 1.25, d)) + 0.1 * rng.normal(size=(d, d))
    b = 0.5 * rng.normal(size=d)
    return x @ a.T + b, a, b


def relative_error(estimate: np.ndarray, truth: np.ndarray) -> float:
    return float(np.sqrt(((estimate - truth) ** 2).mean() / ((truth - truth.mean(axis=0)) ** 2).mean()))


def test_fmllr_recovers_distorted_speakers(mixture, trained):
    """Three speakers, each distorted by its own affine map, adapted to a GMM trained on clean
    frames: the adapted frames are within ~5% (relative RMS) of the originals, from ~35-50%."""
    gmm, _ = trained
    rng = np.random.default_rng(1)
    for speaker in range(3):
        clean = mixture.sample(3000, seed=40 + speaker)
        distorted, _, _ = distort(clean, rng)
        result = estimate_fmllr(gmm, distorted)
        adapted = transform_frames(torch.from_numpy(distorted), result.transform).numpy()
        before, after = relative_error(distorted, clean), relative_error(adapted, clean)
        assert result.updated and before > 0.3 and after < 0.07, (before, after)
        clean_ll = float(gmm.log_likelihood(torch.from_numpy(clean)).mean())
        # The per-frame log-likelihood rises to that of the clean frames (with or without the Jacobian).
        assert result.loglike_before < clean_ll - 1.0
        assert result.loglike_after > clean_ll - 0.05
        assert result.objective[-1] > result.objective[0] + 1.0


def test_fmllr_iterates_until_converged_and_undoes_maps_far_from_identity(mixture, trained):
    """The iteration rule: EM stops once an iteration gains less than the tolerance (1e-4 nats
    per frame here), not after a fixed count; maps with ||A - I||_2 near 1 (the frames'
    relative error ~0.4-0.6 before) are undone to the noise floor of 3000 frames."""
    gmm, _ = trained
    for speaker in range(4):
        rng = np.random.default_rng([50, speaker])
        clean = mixture.sample(3000, seed=60 + speaker)
        a = np.eye(8) + 0.5 * rng.normal(size=(8, 8)) / np.sqrt(8)
        distorted = clean @ a.T + 0.5 * rng.normal(size=8)
        result = estimate_fmllr(gmm, distorted, iters=20, tolerance=1e-4)
        adapted = transform_frames(torch.from_numpy(distorted), result.transform).numpy()
        before, after = relative_error(distorted, clean), relative_error(adapted, clean)
        assert np.linalg.norm(a - np.eye(8), 2) > 0.7 and before > 0.3, before
        assert after < 0.07, (speaker, before, after)
        iterations = len(result.objective) - 1
        assert iterations < 20 and result.objective[-1] - result.objective[-2] < 1e-4


def test_fmllr_auxiliary_function_never_decreases(mixture, trained):
    gmm, _ = trained
    distorted, _, _ = distort(mixture.sample(2000, seed=5), np.random.default_rng(2))
    result = estimate_fmllr(gmm, distorted, iters=4, passes=5, trace=True, tolerance=0.0)
    assert len(result.aux_trace) == 4
    for trace in result.aux_trace:  # Q before and after every row update, per EM iteration
        assert len(trace) == 1 + 5 * 8
        assert all(b >= a - 1e-7 * abs(a) for a, b in zip(trace, trace[1:]))
        assert trace[-1] > trace[0] or np.isclose(trace[-1], trace[0])
    # EM: log-likelihood plus log|det A| never decreases across iterations.
    objective = result.objective
    assert len(objective) == 5 and all(b >= a - 1e-9 for a, b in zip(objective, objective[1:]))


def test_row_updates_reach_the_optimum_scipy_finds(mixture, trained):
    """The row-by-row update maximises Q: compare with BFGS on Q with its analytic gradient."""
    gmm, _ = trained
    distorted, _, _ = distort(mixture.sample(1500, seed=6), np.random.default_rng(3))
    stats, _ = accumulate(gmm, torch.from_numpy(distorted), identity_transform(8))
    ours = update_transform(identity_transform(8), stats, passes=40)

    def negative_q(flat):
        w = flat.reshape(8, 9)
        cofactors = np.hstack([np.linalg.inv(w[:, :8]).T, np.zeros((8, 1))])
        gradient = stats.beta * cofactors + stats.K - np.einsum("ijk,ik->ij", stats.G, w)
        return -aux_function(w, stats), -gradient.ravel()

    reference = scipy.optimize.minimize(
        negative_q, identity_transform(8).ravel(), jac=True, method="BFGS", options={"gtol": 1e-8, "maxiter": 5000}
    )
    assert aux_function(ours, stats) == pytest.approx(-reference.fun, rel=1e-9)
    np.testing.assert_allclose(ours, reference.x.reshape(8, 9), atol=1e-4)


def test_too_few_frames_keep_the_identity(trained, mixture):
    gmm, _ = trained
    result = estimate_fmllr(gmm, mixture.sample(300, seed=7), min_count=500)
    assert not result.updated and np.array_equal(result.transform, identity_transform(8))
    assert result.count == pytest.approx(300)


def test_stats_match_their_definition(mixture, trained):
    """K and G_i against a frame-by-frame loop over the definition."""
    gmm, _ = trained
    x = mixture.sample(40, seed=8)
    w = identity_transform(8) + 0.05
    stats, loglike = accumulate(gmm, torch.from_numpy(x), w)
    posteriors, ll = gmm.posteriors(transform_frames(torch.from_numpy(x), w))
    posteriors, means, inv_vars = posteriors.numpy(), gmm.means.numpy(), 1 / gmm.variances.numpy()
    K, G = np.zeros((8, 9)), np.zeros((8, 9, 9))
    for t in range(40):
        xi = np.append(x[t], 1.0)
        for m in range(16):
            K += posteriors[t, m] * np.outer(means[m] * inv_vars[m], xi)
            G += posteriors[t, m] * inv_vars[m][:, None, None] * np.outer(xi, xi)[None]
    np.testing.assert_allclose(stats.K, K, rtol=1e-9)
    np.testing.assert_allclose(stats.G, G, rtol=1e-9)
    assert stats.beta == pytest.approx(40) and loglike == pytest.approx(float(ll.sum()))


# ------------------------------------------------------------------------ LDA + MLLT


def test_lda_whitens_within_class_and_orders_by_separation():
    rng = np.random.default_rng(4)
    classes, per_class, dim = 6, 400, 5
    centres = np.zeros((classes, dim))
    centres[:, 0] = np.arange(classes) * 3.0  # dimension 0 separates the classes best
    centres[:, 1] = rng.normal(0, 0.5, classes)
    labels = np.repeat(np.arange(classes), per_class)
    mixing = np.eye(dim) + 0.3 * rng.normal(size=(dim, dim))
    x = (centres[labels] + rng.normal(size=(len(labels), dim))) @ mixing.T
    posteriors = torch.nn.functional.one_hot(torch.from_numpy(labels), classes).double()
    lda, values = estimate_lda(accumulate_lda(posteriors, torch.from_numpy(x)), 2)
    y = x @ lda.T
    within = sum(np.cov(y[labels == c].T, bias=True) * per_class for c in range(classes)) / len(labels)
    np.testing.assert_allclose(within, np.eye(2), atol=1e-4)
    assert values[0] > 5 * values[1] > 0 and np.all(np.diff(values) <= 1e-12)
    # The top direction recovers dimension 0 of the unmixed space.
    direction = lda[0] @ mixing
    assert abs(direction[0]) / np.linalg.norm(direction) > 0.99


def test_mllt_never_decreases_and_fits_rotated_diagonal_gaussians_better():
    """Components with diagonal covariances of very different scales per dimension, all
    rotated the same way: after MLLT, diagonal Gaussians fit far better."""
    rng = np.random.default_rng(5)
    components, dim = 6, 4
    means = rng.normal(0, 2, (components, dim))
    variances = np.array([3.0, 1.0, 0.3, 0.05]) * rng.uniform(0.8, 1.2, (components, dim))
    labels = rng.integers(0, components, 6000)
    rotation, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    z = torch.from_numpy((means[labels] + rng.normal(size=(6000, dim)) * np.sqrt(variances[labels])) @ rotation.T)
    gmm, _ = train_gmm(z, components, final_iters=10)
    stats, _ = accumulate_mllt(gmm, z)
    trace = []
    transform = update_mllt(stats, passes=10, trace=trace)
    assert len(trace) == 40 and all(b >= a - 1e-7 * abs(a) for a, b in zip(trace, trace[1:]))
    assert mllt_aux(transform, stats) > mllt_aux(np.eye(dim), stats)
    rotated = z @ torch.from_numpy(transform).T
    refit, _ = train_gmm(rotated, components, final_iters=10)
    jacobian = float(np.linalg.slogdet(transform)[1])
    gain = float(refit.log_likelihood(rotated).mean()) + jacobian - float(gmm.log_likelihood(z).mean())
    assert gain > 0.3  # nats per frame (measured 0.45)


def test_front_end_projects_to_the_requested_dimension():
    mixture = Mixture(dim=6, components=8, seed=7)
    base = mixture.sample(3000, seed=9)
    spliced = np.hstack([np.roll(base, shift, axis=0) for shift in (1, 0, -1)])
    front = train_front_end(
        torch.from_numpy(base),
        torch.from_numpy(spliced).split(CHUNK_FRAMES),
        dim=5,
        num_components=8,
        mllt_iters=2,
        em_iters=2,
        final_iters=2,
    )
    assert front.matrix.shape == (5, 18) and front.gmm.dim == 5 and front.gmm.num_components == 8
    assert front.loglike_per_frame[-1] > front.loglike_per_frame[0]
    projected = torch.from_numpy(spliced @ front.matrix.T)
    stats = gmm_accumulate(front.gmm, projected)
    assert stats.loglike / stats.frames == pytest.approx(front.loglike_per_frame[-1], abs=0.05)


@pytest.mark.parametrize("block", [1, 700, 1024, 2500])
def test_projection_in_place_is_the_whole_product(block):
    rng = np.random.default_rng(4)
    spliced = rng.normal(size=(2500, 12)).astype(np.float32)
    matrix = torch.from_numpy(rng.normal(size=(5, 12)))
    z = project(np.array_split(spliced, range(block, 2500, block)), matrix, 2500)
    np.testing.assert_allclose(z.numpy(), spliced.astype(np.float64) @ matrix.numpy().T, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="2500 spliced frames for 2600"):
        project([spliced], matrix, 2600)
