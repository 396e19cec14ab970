"""Kaldi matrices and per-speaker transforms through kaldiio."""

import struct

import kaldiio
import numpy as np
import pytest

from asr.kaldi.matrix import apply_transform, read_matrix, read_transforms, write_matrix, write_transforms
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
