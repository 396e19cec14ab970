"""Full-covariance UBM, i-vector extractor (EM) and extraction, on frames drawn from a known
total-variability model: against references, their guarantees, and speaker discrimination."""

import kaldiio
import numpy as np
import pytest
import scipy.stats
import torch

from asr.features.ivector import extractor as iv
from asr.features.ivector.full_gmm import FullGmm, accumulate, gselect, train_full_ubm
from asr.features.gmm import train_gmm
from asr.features.ivector.pca import estimate_pca

D, C, RANK = 6, 8, 3  # frame dimension, Gaussians, speaker subspace rank


class Speakers:
    """Frames of speaker s: component c ~ weights, x = mu_c + T_c w_s + L_c e, w_s ~ N(0, I):
    exactly the model an i-vector extractor fits (with a 3-dim speaker subspace)."""

    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.means = rng.normal(0, 3, (C, D))
        self.weights = rng.dirichlet(np.full(C, 5.0))
        self.factors = np.stack([0.7 * np.eye(D) + 0.2 * np.tril(rng.normal(size=(D, D)), -1) for _ in range(C)])
        self.subspace = rng.normal(0, 0.6, (C, D, RANK))

    def frames(self, speaker: int, n: int, session: int) -> np.ndarray:
        w = np.random.default_rng([speaker, 99]).normal(size=RANK)
        rng = np.random.default_rng([speaker, session])
        c = rng.choice(C, n, p=self.weights)
        noise = np.einsum("tij,tj->ti", self.factors[c], rng.normal(size=(n, D)))
        return self.means[c] + np.einsum("tdr,r->td", self.subspace[c], w) + noise


@pytest.fixture(scope="module")
def speakers():
    return Speakers()


@pytest.fixture(scope="module")
def training(speakers):
    """40 training speakers x 2000 frames; the UBMs and every speaker's statistics, float64."""
    data = {s: torch.from_numpy(speakers.frames(s, 2000, 0)) for s in range(40)}
    pooled = torch.cat(list(data.values()))
    diag, _ = train_gmm(pooled, C, final_iters=10)
    full, full_report = train_full_ubm(diag, pooled, iters=6, num_gselect=C, min_occupancy=10)
    ubm = iv.Ubm(diag, full, num_gselect=C)
    counts, first, second = [], [], 0
    for x in data.values():
        indices, weights = ubm.posteriors(x)
        n, f = iv.zeroth_first_order(x, indices, weights, C)
        counts.append(n)
        first.append(f)
        second = second + iv.second_order(x, indices, weights, C)
    return ubm, full_report, iv.TrainingStats(torch.cat(counts), torch.cat(first), second)


@pytest.fixture(scope="module")
def trained(training):
    ubm, _, stats = training
    report = []
    extractor = iv.train_extractor(
        iv.IvectorExtractor.init_from_ubm(ubm.full, 5, seed=0), stats, iters=10, min_count=10, report=report
    )
    return extractor, report


# -------------------------------------------------------------------------- full UBM


def test_full_gmm_loglikelihoods_match_scipy(speakers):
    rng = np.random.default_rng(1)
    covariances = np.stack([f @ f.T for f in speakers.factors])
    gmm = FullGmm(torch.from_numpy(speakers.weights), torch.from_numpy(speakers.means), torch.from_numpy(covariances))
    x = speakers.frames(0, 30, 5)
    selection = torch.from_numpy(np.stack([rng.permutation(C)[:3] for _ in range(30)]))
    ours = gmm.selected_loglikes(torch.from_numpy(x), selection).numpy()
    for t in range(30):
        for j, c in enumerate(selection[t].tolist()):
            reference = np.log(speakers.weights[c]) + scipy.stats.multivariate_normal(
                speakers.means[c], covariances[c]
            ).logpdf(x[t])
            assert ours[t, j] == pytest.approx(reference, rel=1e-10)
    posteriors, _ = gmm.posteriors(torch.from_numpy(x), selection)
    np.testing.assert_allclose(posteriors.sum(dim=1).numpy(), 1.0)


def test_full_ubm_em_never_decreases_and_beats_the_diagonal_one(speakers, training):
    ubm, report, _ = training
    objective = report.loglike_per_frame
    assert all(b >= a - 1e-9 for a, b in zip(objective, objective[1:]))
    held_out = torch.from_numpy(speakers.frames(77, 3000, 1))
    full_ll = accumulate(ubm.full, held_out, gselect(ubm.diag, held_out, C)).loglike / 3000
    diag_ll = float(ubm.diag.log_likelihood(held_out).mean())
    assert full_ll > diag_ll + 0.1  # the components' covariances are far from diagonal


def test_full_gmm_kaldi_file_round_trip(training, tmp_path):
    full = training[0].full
    full.save(tmp_path / "final.ubm")
    data = (tmp_path / "final.ubm").read_bytes()
    assert data.startswith(b"\0B<FullGMM> <GCONSTS> FV ") and data.endswith(b"</FullGMM> ")
    again = FullGmm.load(tmp_path / "final.ubm")
    # stored as float32 precisions, as Kaldi's BaseFloat
    np.testing.assert_allclose(again.covariances.numpy(), full.covariances.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(again.means.numpy(), full.means.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(again.weights.numpy(), full.weights.numpy(), rtol=1e-6)


# ------------------------------------------------------------------------ extractor


def test_posterior_matches_its_definition(training):
    """Mean and variance of w against a per-component loop over the formula."""
    ubm, _, stats = training
    extractor = iv.IvectorExtractor.init_from_ubm(ubm.full, 5, seed=3)
    post = iv.posterior(extractor, stats.counts[:2], stats.first[:2], with_variance=True)
    m, inv = extractor.projections.numpy(), extractor.inv_covars.numpy()
    for s in range(2):
        precision, linear = np.eye(5), np.zeros(5)
        linear[0] = extractor.prior_offset
        for c in range(C):
            precision += stats.counts[s, c].item() * m[c].T @ inv[c] @ m[c]
            linear += m[c].T @ inv[c] @ stats.first[s, c].numpy()
        np.testing.assert_allclose(post.mean[s].numpy(), np.linalg.solve(precision, linear), rtol=1e-9)
        np.testing.assert_allclose(post.variance[s].numpy(), np.linalg.inv(precision), rtol=1e-9, atol=1e-12)


def test_auxiliary_is_largest_at_the_posterior(training):
    """The objective is a lower bound over distributions of w, tight at the exact posterior."""
    ubm, _, stats = training
    extractor = iv.IvectorExtractor.init_from_ubm(ubm.full, 5, seed=3)
    post = iv.posterior(extractor, stats.counts, stats.first, with_variance=True)
    best = iv.auxiliary(extractor, stats, post)
    shifted = iv.Posterior(post.mean + 0.05, post.variance)
    scaled = iv.Posterior(post.mean, post.variance * 1.2)
    assert iv.auxiliary(extractor, stats, shifted) < best and iv.auxiliary(extractor, stats, scaled) < best


def test_extractor_em_never_decreases(training, trained):
    _, _, stats = training
    extractor, report = trained
    objective = [i.auxiliary_per_frame for i in report] + [iv.final_auxiliary(extractor, stats)]
    assert len(objective) == 11
    assert all(b >= a - 1e-9 * abs(a) for a, b in zip(objective, objective[1:])), objective
    assert objective[-1] > objective[0] + 0.5  # nats per (scaled) frame: the speaker subspace is learnt
    assert all(i.floored_eigenvalues == 0 and i.skipped_components == 0 for i in report)


def test_too_little_data_for_any_covariance_keeps_them(training):
    """Every component below min_count (a small set): the covariances stay, the rest trains
    (it raised from the Cholesky factorisation of an empty average)."""
    ubm, _, stats = training
    start = iv.IvectorExtractor.init_from_ubm(ubm.full, 5, seed=0)
    extractor, iteration = iv.em_iteration(start, stats, min_count=1e12)
    assert iteration.skipped_components == C and iteration.floored_eigenvalues == 0
    assert torch.equal(extractor.inv_covars, start.inv_covars) and torch.isfinite(extractor.projections).all()


def test_prior_update_keeps_the_prior_standard(training, trained):
    """After the prior re-estimation the training i-vectors' mean lies on the first axis at
    the new offset and their covariance (including the posteriors' variance) is the identity."""
    _, _, stats = training
    extractor, _ = trained
    post = iv.posterior(extractor, stats.counts, stats.first, with_variance=True)
    updated = iv.update_prior(extractor, post)
    old, new = (e.projections.reshape(-1, 5) for e in (extractor, updated))
    transform = torch.linalg.inv(torch.linalg.lstsq(old, new).solution)  # M_new = M_old V^-1, w_new = V w_old
    mean = (transform @ post.mean.mean(dim=0)).numpy()
    assert (
        mean[0] == pytest.approx(updated.prior_offset, rel=1e-6)
        and np.abs(mean[1:]).max() < 1e-6 * updated.prior_offset
    )
    scatter = (
        transform @ (post.variance + post.mean[:, :, None] * post.mean[:, None, :]).mean(dim=0) @ transform.T
    ).numpy()
    np.testing.assert_allclose(scatter - np.outer(mean, mean), np.eye(5), atol=1e-6)


def test_the_prior_update_does_not_depend_on_the_eigenvectors_signs(training, trained, monkeypatch):
    """cuSOLVER and LAPACK return eigenvectors with different signs: the update must not follow."""
    _, _, stats = training
    extractor, _ = trained
    post = iv.posterior(extractor, stats.counts, stats.first, with_variance=True)
    expected = iv.update_prior(extractor, post)
    eigh = torch.linalg.eigh

    def flipped(matrix):
        values, vectors = eigh(matrix)
        return values, vectors * torch.tensor([(-1.0) ** i for i in range(vectors.shape[1])], dtype=vectors.dtype)

    monkeypatch.setattr(torch.linalg, "eigh", flipped)
    got = iv.update_prior(extractor, post)
    torch.testing.assert_close(got.projections, expected.projections, rtol=1e-9, atol=1e-9)


def test_ivectors_tell_speakers_apart(speakers, training, trained):
    """Cosine scoring between utterances (300 frames) of 20 unseen speakers: equal error rate
    3.7% here, far below the 50% of chance (goal: below 10%)."""
    ubm = training[0]
    extractor, _ = trained
    vectors, labels = [], []
    for speaker in range(100, 120):
        for session in range(1, 6):
            x = torch.from_numpy(speakers.frames(speaker, 300, session))
            counts, first = iv.zeroth_first_order(x, *ubm.posteriors(x), C)
            vectors.append(iv.extract(extractor, counts, first, max_count=0)[0].numpy())
            labels.append(str(speaker))
    assert iv.speaker_eer(np.stack(vectors), labels) < 0.10


def test_online_ivectors_converge_to_the_offline_one(speakers, training, trained):
    """Row i uses frames 0..10 i: the last row of a 1001-frame utterance sees them all and
    equals the offline i-vector, and the distance to it shrinks as the utterance grows
    (averaged over 8 utterances: one utterance's distance is a random walk)."""
    ubm = training[0]
    extractor, _ = trained
    rows = (1, 10, 30, 60, 90, 100)
    distances = []
    for speaker in range(200, 208):
        x = torch.from_numpy(speakers.frames(speaker, 1001, 1))
        indices, weights = ubm.posteriors(x)
        online = iv.extract_online(extractor, x, indices, weights, period=10, max_count=0)
        assert online.shape == (101, 5)
        offline = iv.extract(extractor, *iv.zeroth_first_order(x, indices, weights, C), max_count=0)[0]
        distances.append([float((online[i] - offline).norm() / offline.norm()) for i in rows])
        # Row 30 is the offline i-vector of the first 301 frames.
        prefix = iv.extract(extractor, *iv.zeroth_first_order(x[:301], indices[:301], weights[:301], C), max_count=0)[0]
        np.testing.assert_allclose(online[30].numpy(), prefix.numpy(), rtol=1e-9, atol=1e-9)
    mean = np.mean(distances, axis=0)
    assert mean[-1] < 1e-10 and all(b < a for a, b in zip(mean, mean[1:])), mean


def test_max_count_weighs_long_sessions_as_max_count(speakers, training, trained):
    """--max-count: doubling all statistics past the cap does not change the i-vector (the
    prior is scaled up instead), while without a cap it moves it away from the prior."""
    ubm = training[0]
    extractor, _ = trained
    x = torch.from_numpy(speakers.frames(300, 4000, 1))
    counts, first = iv.zeroth_first_order(x, *ubm.posteriors(x), C)  # count 400 (posteriors scaled by 0.1)
    capped, doubled = (iv.extract(extractor, k * counts, k * first, max_count=100) for k in (1, 2))
    np.testing.assert_allclose(doubled.numpy(), capped.numpy(), rtol=1e-9, atol=1e-9)
    free, free_doubled = (iv.extract(extractor, k * counts, k * first, max_count=0) for k in (1, 2))
    assert float(free_doubled.norm()) > float(free.norm()) > float(capped.norm())


def test_extractor_kaldi_file_round_trip(trained, tmp_path):
    extractor, _ = trained
    extractor.save(tmp_path / "final.ie")
    data = (tmp_path / "final.ie").read_bytes()
    assert data.startswith(b"\0B<IvectorExtractor> <w> DM \4\0\0\0\0\4\0\0\0\0<w_vec> DV ")
    again = iv.IvectorExtractor.load(tmp_path / "final.ie")
    assert again.prior_offset == extractor.prior_offset
    for name in ("weights", "projections", "inv_covars"):
        np.testing.assert_array_equal(getattr(again, name).numpy(), getattr(extractor, name).numpy())


def test_ivectors_round_trip_through_kaldiio(trained, training, speakers, tmp_path):
    """ivector_online matrices and per-speaker vectors, as Kaldi writes them, read back."""
    ubm = training[0]
    extractor, _ = trained
    x = torch.from_numpy(speakers.frames(5, 95, 2))
    online = iv.extract_online(extractor, x, *ubm.posteriors(x)).numpy().astype(np.float32)
    with kaldiio.WriteHelper(f"ark,scp:{tmp_path / 'ivector_online.ark'},{tmp_path / 'ivector_online.scp'}") as writer:
        writer("utt1", online)
    with kaldiio.WriteHelper(f"ark,scp:{tmp_path / 'ivectors_spk.ark'},{tmp_path / 'ivectors_spk.scp'}") as writer:
        writer("spk1", online[-1])
    assert online.shape == (10, 5)
    np.testing.assert_array_equal(kaldiio.load_scp(str(tmp_path / "ivector_online.scp"))["utt1"], online)
    vector = kaldiio.load_scp(str(tmp_path / "ivectors_spk.scp"))["spk1"]
    assert vector.shape == (5,) and (tmp_path / "ivectors_spk.ark").read_bytes()[5:10] == b"\0BFV "


# ------------------------------------------------------------------------- helpers


def test_equal_error_rate():
    assert iv.equal_error_rate(np.array([1.0, 2, 3]), np.array([-1.0, 0, 0.5])) == 0.0
    assert iv.equal_error_rate(np.arange(4.0), np.arange(4.0)) == pytest.approx(0.5)
    rng = np.random.default_rng(0)
    # two unit Gaussians 2 apart: EER = Phi(-1) = 0.1587; sampling error ~ 0.0012 for 1e5 each
    assert iv.equal_error_rate(rng.normal(1, 1, 100_000), rng.normal(-1, 1, 100_000)) == pytest.approx(
        0.1587, abs=0.006
    )


def test_pca_whitens_and_centres():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(5000, 4)) @ rng.normal(size=(4, 4)) + 3.0
    transform, values = estimate_pca(x, 3)
    y = x @ transform[:, :-1].T + transform[:, -1]
    np.testing.assert_allclose(y.mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(np.cov(y.T, bias=True), np.eye(3), atol=1e-10)
    assert np.all(np.diff(values) <= 0)
