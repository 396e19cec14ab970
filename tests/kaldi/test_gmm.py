"""Kaldi's DiagGmm file, written and read as gmm-global-copy does."""

import struct

import numpy as np
import pytest
import scipy.stats
import torch

from asr.features.gmm import DiagGmm
from asr.kaldi.gmm import diag_gmm_bytes, read_diag_gmm
from asr.utils.errors import InputError


def test_diag_gmm_round_trip_and_kaldi_layout(tmp_path):
    rng = np.random.default_rng(2)
    weights = rng.dirichlet(np.ones(3))
    means, variances = rng.normal(size=(3, 2)), rng.uniform(0.5, 2, (3, 2))
    gmm = DiagGmm(*(torch.from_numpy(a) for a in (weights, means, variances)))
    gmm.save(tmp_path / "final.dubm")
    raw = (tmp_path / "final.dubm").read_bytes()
    assert raw == diag_gmm_bytes(weights, means, variances)
    assert raw.startswith(b"\0B<DiagGMM> <GCONSTS> FV \x04" + struct.pack("<i", 3))
    for token in (b"<WEIGHTS> FV ", b"<MEANS_INVVARS> FM ", b"<INV_VARS> FM "):
        assert token in raw
    assert raw.endswith(b"</DiagGMM> ")
    # GCONSTS: the log-likelihood of the zero vector, by scipy.
    offset = raw.index(b"FV ") + 8
    gconsts = np.frombuffer(raw[offset : offset + 12], "<f4")
    expected = np.log(weights) + scipy.stats.norm(means, np.sqrt(variances)).logpdf(0).sum(axis=1)
    np.testing.assert_allclose(gconsts, expected, rtol=1e-6)
    loaded = DiagGmm.load(tmp_path / "final.dubm")
    for ours, theirs in zip((weights, means, variances), (loaded.weights, loaded.means, loaded.variances)):
        np.testing.assert_allclose(theirs.numpy(), ours, rtol=1e-6)


def test_damaged_gmm_file_is_an_input_error(tmp_path):
    path = tmp_path / "final.dubm"
    path.write_bytes(b"\0B<DiagGMM> <WEIGHTS> FV \x04\x03\x00\x00\x00")
    with pytest.raises(InputError, match="final.dubm: ends inside the DiagGmm"):
        read_diag_gmm(path)
    path.write_text("<DiagGMM> text form")
    with pytest.raises(InputError, match="binary"):
        read_diag_gmm(path)
