"""The vectorised EM statistics against kaldi_hmm_gmm's per-frame accumulator, and EM on fixed
alignments never lowering the likelihood (mixing up included)."""

import kaldi_hmm_gmm as khg
import numpy as np

from asr.gmm.stats import ModelArrays, Stats, accumulate, update
from tests.gmm.handmade import HandmadeLang


def monophone_model(dim: int, nmix: int, seed: int = 0):
    topo = HandmadeLang().topology()
    tree = khg.monophone_context_dependency(
        phones=topo.phones, phone2num_pdf_classes=topo.get_phone_to_num_pdf_classes()
    )
    tm = khg.TransitionModel(ctx_dep=tree, hmm_topo=topo)
    rng = np.random.default_rng(seed)
    am = khg.AmDiagGmm()
    for _ in range(tree.num_pdfs):
        gmm = khg.DiagGmm(nmix=nmix, dim=dim)
        gmm.set_weights(np.full(nmix, 1.0 / nmix, np.float32))
        gmm.set_invvars_and_means(np.ones((nmix, dim), np.float32), rng.normal(size=(nmix, dim)).astype(np.float32))
        gmm.compute_gconsts()
        am.add_pdf(gmm)
    return tm, am


def aligned_frames(tm, count: int, dim: int, seed: int = 1):
    """Random transition ids and frames from two Gaussians per pdf (so that mixing up pays)."""
    rng = np.random.default_rng(seed)
    tids = rng.integers(1, tm.num_transition_ids + 1, count).astype(np.int32)
    pdfs = np.asarray(tm.id2pdf_id, np.int64)[tids]
    centre = rng.normal(scale=2.0, size=(tm.num_pdfs, 2, dim))
    side = rng.integers(0, 2, count)
    return (centre[pdfs, side] + rng.normal(scale=0.5, size=(count, dim))).astype(np.float32), pdfs, tids


def test_statistics_equal_kaldis_per_frame_accumulator():
    tm, am = monophone_model(dim=3, nmix=2)
    feats, pdfs, tids = aligned_frames(tm, 400, 3)
    model = ModelArrays.of(am)
    stats = Stats.zeros(model.num_gauss, 3, tm.num_transition_ids)
    accumulate(model, stats, feats, pdfs, tids)
    kaldi = khg.AccumAmDiagGmm()
    kaldi.init(model=am, flags=khg.GmmUpdateFlags.kGmmAll)
    for frame, pdf in zip(feats, pdfs):
        kaldi.accumulate_for_gmm(model=am, data=frame, gmm_index=int(pdf), weight=1.0)
    assert abs(stats.log_like - kaldi.tot_log_like) < 1e-4 * abs(kaldi.tot_log_like)
    for pdf in range(am.num_pdfs):
        acc, rows = kaldi.get_acc(pdf), slice(model.offsets[pdf], model.offsets[pdf + 1])
        np.testing.assert_allclose(stats.occupancy[rows], np.asarray(acc.occupancy), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(stats.sum_x[rows], np.asarray(acc.mean_accumulator), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(stats.sum_x2[rows], np.asarray(acc.variance_accumulator), rtol=1e-5, atol=1e-5)
    assert (
        stats.transitions.sum() == 400
        and (np.bincount(tids, minlength=tm.num_transition_ids + 1) == stats.transitions).all()
    )


def test_em_never_lowers_the_likelihood_on_fixed_alignments():
    tm, am = monophone_model(dim=4, nmix=1)
    feats, pdfs, tids = aligned_frames(tm, 6000, 4)
    likes = []
    for iteration in range(8):
        model = ModelArrays.of(am)
        stats = Stats.zeros(model.num_gauss, 4, tm.num_transition_ids)
        accumulate(model, stats, feats, pdfs, tids)
        likes.append(stats.log_like / stats.frames)
        # a Gaussian split perturbs means (by 0.01 standard deviations): the pass after may not gain
        result = update(
            am, tm, stats, model, min_gaussian_occupancy=3, mixup_to=2 * am.num_pdfs if iteration == 3 else 0
        )
        assert result.gmm_objf_change >= 0
    assert am.num_gauss == 2 * am.num_pdfs
    gains = np.diff(likes)
    assert (np.delete(gains, 3) >= -1e-9).all(), likes
    assert likes[-1] - likes[0] > 0.5  # the second Gaussian per pdf pays
