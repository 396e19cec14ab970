"""Kaldi formats: matrices and per-speaker transforms through kaldiio, and the DiagGmm model."""

import struct

import kaldiio
import numpy as np
import pytest
import scipy.stats
import torch

from asr.features.gmm import DiagGmm
from asr.kaldi.gmm import (
    apply_transform,
    diag_gmm_bytes,
    read_diag_gmm,
    read_matrix,
    read_transforms,
    write_matrix,
    write_transforms,
)
from asr.utils.errors import InputError


def kaldi_binary_matrix(rows: int, cols: int) -> bytes:
    """The header Kaldi's Matrix<float>::Write(binary=true) emits."""
    return b"\0BFM \x04" + struct.pack("<i", rows) + b"\x04" + struct.pack("<i", cols)


def test_transforms_round_trip_as_kaldi_matrices(tmp_path):
    rng = np.random.default_rng(0)
    transforms = {"sw02001-B": rng.normal(size=(3, 4)), "sw02001-A": rng.normal(size=(3, 4))}
    scp = write_transforms(tmp_path, transforms)
    lines = scp.read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["sw02001-A", "sw02001-B"]  # sorted, one key per line
    assert all(line.split()[1].startswith(str((tmp_path / "trans.ark").absolute()) + ":") for line in lines)
    # trans.ark is a Kaldi binary archive: "key " then a float matrix, as transform-feats reads it.
    ark = (tmp_path / "trans.ark").read_bytes()
    header = b"sw02001-A " + kaldi_binary_matrix(3, 4)
    assert ark.startswith(header)
    np.testing.assert_array_equal(
        np.frombuffer(ark[len(header) : len(header) + 48], "<f4").reshape(3, 4),
        transforms["sw02001-A"].astype(np.float32),
    )
    back = read_transforms(scp)
    assert sorted(back) == sorted(transforms)
    for key, value in transforms.items():
        np.testing.assert_allclose(back[key], value, rtol=1e-6)
        np.testing.assert_allclose(kaldiio.load_scp(str(scp))[key], value, rtol=1e-6)


def test_matrix_file_round_trip(tmp_path):
    matrix = np.arange(12, dtype=np.float64).reshape(3, 4) / 7
    write_matrix(tmp_path / "final.mat", matrix)
    assert (tmp_path / "final.mat").read_bytes().startswith(kaldi_binary_matrix(3, 4))
    np.testing.assert_allclose(read_matrix(tmp_path / "final.mat"), matrix, rtol=1e-7)
    with pytest.raises(InputError, match="missing"):
        read_matrix(tmp_path / "absent.mat")


def test_apply_transform_like_transform_feats():
    rng = np.random.default_rng(1)
    x, a, b = rng.normal(size=(5, 3)), rng.normal(size=(2, 3)), rng.normal(size=2)
    np.testing.assert_allclose(apply_transform(x, a), x @ a.T, rtol=1e-6)
    np.testing.assert_allclose(apply_transform(x, np.hstack([a, b[:, None]])), x @ a.T + b, rtol=1e-6)
    with pytest.raises(InputError, match="does not apply"):
        apply_transform(x, np.ones((2, 5)))


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
