"""GMM decoding's per-pdf log-likelihoods against kaldi-hmm-gmm's own AmDiagGmm."""

import kaldi_hmm_gmm as khg
import numpy as np

from asr.gmm.decoding import FRAME_CHUNK, pdf_log_likelihoods
from asr.gmm.stats import ModelArrays


def random_model(rng, num_pdfs: int, dim: int) -> khg.AmDiagGmm:
    am = khg.AmDiagGmm()
    for pdf in range(num_pdfs):
        gauss = 1 + pdf % 3  # pdfs of 1, 2 and 3 Gaussians
        gmm = khg.DiagGmm(nmix=gauss, dim=dim)
        gmm.set_weights(rng.dirichlet(np.ones(gauss)).astype(np.float32))
        gmm.set_means(rng.normal(size=(gauss, dim)).astype(np.float32))
        gmm.set_invvars(rng.uniform(0.5, 2.0, size=(gauss, dim)).astype(np.float32))
        gmm.compute_gconsts()
        am.add_pdf(gmm)
    return am


def test_pdf_log_likelihoods_equal_the_libraries_over_chunk_boundaries():
    rng = np.random.default_rng(0)
    am = random_model(rng, num_pdfs=7, dim=5)
    feats = rng.normal(size=(FRAME_CHUNK + 3, 5)).astype(np.float32)
    ours = pdf_log_likelihoods(ModelArrays.of(am), feats)
    theirs = np.array([[am.log_likelihood(pdf, frame) for pdf in range(7)] for frame in feats])
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-3)
