"""Reading and writing Kaldi's binary objects (the part after the `\\0B` mark): the one reader and
writer of the Kaldi objects that kaldiio does not read (GMMs, i-vector extractors, transition
models, trees).

Kaldi's binary basic types: a token is text ending with a space; an int32 is a size byte (4)
and 4 little-endian bytes, a double a size byte (8) and 8 bytes; a vector is `FV`/`DV`, an
int32 count and the raw floats or doubles; a matrix `FM`/`DM`, rows, columns and the data;
a packed symmetric matrix `FP`/`DP`, rows and the lower triangle; an integer vector a size
byte, an int32 count and the raw int32s.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np

from asr.utils.errors import InputError

MAX_TOKEN = 64  # longer than any Kaldi token: binary data where a token should be


class KaldiBinaryReader:
    """Kaldi's binary tokens and objects from a stream; every defect is an InputError naming
    the file, what was expected and the byte offset. `kind` names the object in messages."""

    def __init__(self, stream: BinaryIO, name: str, kind: str):
        self.stream, self.name, self.kind = stream, name, kind

    def fail(self, what: str) -> InputError:
        return InputError(f"{self.name}: not a Kaldi binary {self.kind} ({what} at byte {self.stream.tell()})")

    def read(self, n: int) -> bytes:
        data = self.stream.read(n)
        if len(data) != n:
            raise InputError(f"{self.name}: ends inside the {self.kind} at byte {self.stream.tell()}; is it complete?")
        return data

    def token(self) -> str:
        chars = bytearray()
        while (c := self.read(1)) != b" ":
            chars += c
            if len(chars) > MAX_TOKEN:
                raise self.fail("expected a token, got binary data")
        return chars.decode("latin-1")

    def expect(self, *names: str) -> str:
        got = self.token()
        if got not in names:
            raise self.fail(f"expected {' or '.join(names)}, got {got!r}")
        return got

    def _sized(self, size: int, fmt: str, what: str):
        got_size, value = struct.unpack(f"<b{fmt}", self.read(1 + struct.calcsize(fmt)))
        if got_size != size:
            raise self.fail(f"expected {what}, got a {got_size}-byte value")
        return value

    def int32(self) -> int:
        return self._sized(4, "i", "an int32")

    def float32(self) -> float:
        return self._sized(4, "f", "a float (a double-precision model?)")

    def double(self) -> float:
        return self._sized(8, "d", "an 8-byte float")

    def int_vector(self) -> list[int]:
        count = self.int32()
        if count < 0:
            raise self.fail("expected an int32 vector")
        return list(struct.unpack(f"<{count}i", self.read(4 * count)))

    def floats(self, count: int, kind: str) -> np.ndarray:
        """`count` floats (kind FV/FM/FP) or doubles (DV/DM/DP), as float64."""
        dtype = "<f4" if kind[0] == "F" else "<f8"
        return np.frombuffer(self.read(count * np.dtype(dtype).itemsize), dtype=dtype).astype(np.float64)

    def vector(self) -> np.ndarray:
        kind = self.expect("FV", "DV")
        return self.floats(self.int32(), kind)

    def matrix(self) -> np.ndarray:
        kind = self.expect("FM", "DM")
        rows, cols = self.int32(), self.int32()
        return self.floats(rows * cols, kind).reshape(rows, cols)

    def packed(self) -> np.ndarray:
        """A Kaldi SpMatrix as a full symmetric matrix."""
        kind = self.expect("FP", "DP")
        rows = self.int32()
        out = np.zeros((rows, rows))
        out[np.tril_indices(rows)] = self.floats(rows * (rows + 1) // 2, kind)
        return out + np.tril(out, -1).T


# --- writing: the same basic types (WriteToken, WriteBasicType, Vector/Matrix::Write, WriteIntegerVector)

BINARY_MARK = b"\0B"  # the head of a binary Kaldi file (kaldi::Output with binary=true)


def token_bytes(name: str) -> bytes:
    return name.encode("latin-1") + b" "


def int32_bytes(value: int) -> bytes:
    return b"\4" + struct.pack("<i", value)


def int32_vector_bytes(values) -> bytes:
    values = np.ascontiguousarray(values, dtype="<i4")
    return b"\4" + struct.pack("<i", len(values)) + values.tobytes()


def double_bytes(value: float) -> bytes:
    return b"\10" + struct.pack("<d", value)


def vector_bytes(values: np.ndarray, double: bool = False) -> bytes:
    values = np.ascontiguousarray(values, dtype="<f8" if double else "<f4")
    return (b"DV " if double else b"FV ") + int32_bytes(len(values)) + values.tobytes()


def matrix_bytes(values: np.ndarray, double: bool = False) -> bytes:
    values = np.ascontiguousarray(values, dtype="<f8" if double else "<f4")
    rows, cols = values.shape
    return (b"DM " if double else b"FM ") + int32_bytes(rows) + int32_bytes(cols) + values.tobytes()


def packed_bytes(symmetric: np.ndarray, double: bool = False) -> bytes:
    """A Kaldi SpMatrix: the lower triangle, row by row."""
    rows = symmetric.shape[0]
    lower = np.asarray(symmetric)[np.tril_indices(rows)]
    return (
        (b"DP " if double else b"FP ")
        + int32_bytes(rows)
        + np.ascontiguousarray(lower, dtype="<f8" if double else "<f4").tobytes()
    )


# --- a whole file holding one binary object


def binary_file_reader(path: Path, kind: str, how_to_convert: str) -> KaldiBinaryReader:
    """A reader past the `\\0B` mark of the file at `path`, which holds one Kaldi `kind` in binary."""
    if not path.is_file():
        raise InputError(f"{path}: missing {kind}; re-run the features stage")
    data = path.read_bytes()
    reader = KaldiBinaryReader(io.BytesIO(data[2:]), str(path), kind)
    if not data.startswith(BINARY_MARK):
        raise reader.fail(f"no binary mark; convert text models with {how_to_convert}")
    return reader
