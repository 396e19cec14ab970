"""The Kaldi binary reader against kaldiio's writer (vectors and matrices in float and double),
and every defect as an InputError naming the file and what was expected."""

import io
import struct

import kaldiio
import numpy as np
import pytest

from asr.kaldi.binary import KaldiBinaryReader
from asr.utils.errors import InputError


def kaldiio_bytes(array: np.ndarray) -> bytes:
    """What kaldiio writes for one object in binary, without the \\0B mark."""
    buffer = io.BytesIO()
    kaldiio.save_mat(buffer, array)
    data = buffer.getvalue()
    assert data[:2] == b"\0B"
    return data[2:]


def reader(data: bytes) -> KaldiBinaryReader:
    return KaldiBinaryReader(io.BytesIO(data), "model.bin", "DiagGmm")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vectors_and_matrices_read_as_kaldiio_writes_them(dtype):
    rng = np.random.default_rng(0)
    vector, matrix = rng.standard_normal(7).astype(dtype), rng.standard_normal((3, 5)).astype(dtype)
    r = reader(b"<A> " + kaldiio_bytes(vector) + kaldiio_bytes(matrix) + b"</A> ")
    assert r.expect("<A>") == "<A>"
    np.testing.assert_array_equal(r.vector(), vector.astype(np.float64))
    np.testing.assert_array_equal(r.matrix(), matrix.astype(np.float64))
    r.expect("</A>")


def test_scalars_integer_vectors_and_packed_matrices():
    lower = np.array([1.0, 2.0, 3.0])  # [[1, 2], [2, 3]] as Kaldi packs it: row by row, lower triangle
    data = (
        b"\4"
        + struct.pack("<i", -7)
        + b"\4"
        + struct.pack("<f", 0.5)
        + b"\10"
        + struct.pack("<d", 2.25)
        + b"\4"
        + struct.pack("<i", 3)
        + struct.pack("<3i", 4, 5, 6)
        + b"DP \4"
        + struct.pack("<i", 2)
        + lower.tobytes()
    )
    r = reader(data)
    assert (r.int32(), r.float32(), r.double(), r.int_vector()) == (-7, 0.5, 2.25, [4, 5, 6])
    np.testing.assert_array_equal(r.packed(), [[1.0, 2.0], [2.0, 3.0]])


@pytest.mark.parametrize(
    "data, call, message",
    [
        (
            b"<B> ",
            lambda r: r.expect("<A>"),
            r"model.bin: not a Kaldi binary DiagGmm \(expected <A>, got '<B>' at byte 4\)",
        ),
        (b"\4\1\0", lambda r: r.int32(), r"model.bin: ends inside the DiagGmm at byte 3; is it complete\?"),
        (b"\10" + bytes(8), lambda r: r.int32(), r"expected an int32, got a 8-byte value"),
        (b"\4" + bytes(4), lambda r: (r.float32(), r.float32()), r"ends inside"),
        (b"x" * 100, lambda r: r.token(), r"expected a token, got binary data"),
        (b"FV \4" + struct.pack("<i", 3) + bytes(8), lambda r: r.vector(), r"ends inside"),
        (b"FM \4" + struct.pack("<i", 1), lambda r: r.vector(), r"expected FV or DV, got 'FM'"),
    ],
)
def test_defects_name_the_file_and_what_was_expected(data, call, message):
    with pytest.raises(InputError, match=message):
        call(reader(data))
