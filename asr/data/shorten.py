"""Shorten-compressed NIST SPHERE audio (`sample_coding pcm,embedded-shorten-v2.00`), decoded
through FFmpeg's shorten decoder (PyAV).

Some LDC releases (Hub5-2000 and RT-03 among them) store the samples after the 1024-byte SPHERE
header as a shorten stream. libsndfile and SoX cannot read these; Kaldi pipes them through
sph2pipe, which is neither a Debian nor a PyPI package. FFmpeg's decoder is, through PyAV's
wheels, but it insists on what shorten files made from WAV files carry and NIST's embedded
streams lack: a "verbatim" block holding a RIFF header right after the stream header. So we
parse the stream header (a handful of Rice-coded fields), splice in a verbatim block with a
canonical 44-byte RIFF header describing the samples, and hand the result to FFmpeg. The
sample data is not touched: FFmpeg decodes it exactly as written.

What FFmpeg cannot decode (u-law shorten streams, shortpack, wavpack) is refused with a
message that says how to convert the file.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from asr.utils.errors import InputError

MAGIC = b"ajkg"
MAX_UNARY_BITS = 1 << 16  # header fields are small; a longer run of 0s means a damaged stream
# Field widths of the stream header (Tony Robinson's shorten 2.x, as FFmpeg reads it).
ULONG_SIZE = 2
TYPE_SIZE = 4
CHAN_SIZE = 0
BLOCKSIZE_SIZE = 8
LPCQ_SIZE = 2
NSKIP_SIZE = 1
FN_SIZE = 2
FN_VERBATIM = 9
VERBATIM_CHUNK_SIZE = 5
VERBATIM_BYTE_SIZE = 8
# Sample types FFmpeg decodes; others (u-law is 7 in shorten 2.x) it refuses.
TYPE_U8, TYPE_S16HL, TYPE_S16LH = 2, 3, 5
DECODABLE_TYPES = {TYPE_U8: 8, TYPE_S16HL: 16, TYPE_S16LH: 16}
CONVERT_HINT = (
    "convert it to uncompressed SPHERE or WAV with sph2pipe (`sph2pipe -f wav -p FILE OUT.wav`, "
    "from NIST's sph2pipe_v2.5) or NIST's `w_decode -o pcm FILE OUT.sph`, and point wav.scp at the result"
)


@dataclass(frozen=True)
class ShortenHeader:
    version: int
    file_type: int
    channels: int
    block_size: int
    end_bit: int  # where the stream header ends (the first command)


class BitReader:
    """MSB-first bit reader with shorten's Rice codes (unary run of 0s ended by a 1, then k bits)."""

    def __init__(self, data: bytes, bit: int = 0):
        self.bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8))
        self.pos = bit

    def read(self, n: int) -> int:
        if self.pos + n > len(self.bits):
            raise EOFError
        value = 0
        for b in self.bits[self.pos : self.pos + n]:
            value = (value << 1) | int(b)
        self.pos += n
        return value

    def unsigned_rice(self, k: int) -> int:
        ones = np.flatnonzero(self.bits[self.pos : self.pos + MAX_UNARY_BITS])
        if not len(ones):
            raise EOFError
        zeros = int(ones[0])
        self.pos += zeros + 1
        return (zeros << k) | self.read(k)

    def ulong(self, version: int, k: int) -> int:
        """shorten's `uint`: from version 1 on, the width is itself coded first."""
        if version > 0:
            k = self.unsigned_rice(ULONG_SIZE)
        return self.unsigned_rice(k)


def read_stream_header(data: bytes, where: str) -> ShortenHeader:
    if data[:4] != MAGIC:
        raise InputError(
            f"{where}: the SPHERE header says shorten but the data does not start with 'ajkg'; the file is damaged"
        )
    reader = BitReader(data, 40)
    version = data[4]
    try:
        file_type = reader.ulong(version, TYPE_SIZE)
        channels = reader.ulong(version, CHAN_SIZE)
        block_size = 256
        if version > 0:
            block_size = reader.ulong(version, BLOCKSIZE_SIZE)
            reader.ulong(version, LPCQ_SIZE)  # max LPC order
            reader.ulong(version, 0)  # number of block means
            skip_bytes = reader.ulong(version, NSKIP_SIZE)
            reader.pos += 8 * skip_bytes
    except EOFError:
        raise InputError(f"{where}: shorten stream header cut short; the file is truncated") from None
    return ShortenHeader(version, file_type, channels, block_size, reader.pos)


def _rice_bits(value: int, k: int) -> list[int]:
    """The bits of `value` as an unsigned Rice code with k low bits."""
    high = value >> k
    low = [(value >> i) & 1 for i in range(k - 1, -1, -1)]
    return [0] * high + [1] + low


def riff_header(channels: int, rate: int, bits: int) -> bytes:
    """The canonical 44-byte WAV header FFmpeg's shorten decoder reads its rate from."""
    block_align = channels * bits // 8
    return (
        b"RIFF"
        + struct.pack("<I", 36)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<IHHIIHH", 16, 1, channels, rate, rate * block_align, block_align, bits)
        + b"data"
        + struct.pack("<I", 0)
    )


def with_verbatim_header(data: bytes, header: ShortenHeader, rate: int) -> bytes:
    """The stream with a verbatim RIFF block spliced in after its header (sample data untouched)."""
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8))
    verbatim = _rice_bits(FN_VERBATIM, FN_SIZE) + _rice_bits(44, VERBATIM_CHUNK_SIZE)
    for byte in riff_header(header.channels, rate, DECODABLE_TYPES[header.file_type]):
        verbatim += _rice_bits(byte, VERBATIM_BYTE_SIZE)
    spliced = np.concatenate([bits[: header.end_bit], np.array(verbatim, dtype=np.uint8), bits[header.end_bit :]])
    return np.packbits(spliced).tobytes()


def decode_shorten(path: str | Path, header_bytes: int, sample_rate: int, sample_count: int) -> np.ndarray:
    """Samples (frames x channels, float32 in [-1, 1)) of a shorten-compressed SPHERE file."""
    import av  # FFmpeg, imported here so that reading uncompressed audio never needs it

    where = str(path)
    data = Path(path).read_bytes()[header_bytes:]
    header = read_stream_header(data, where)
    if header.file_type not in DECODABLE_TYPES:
        raise InputError(
            f"{where}: shorten sample type {header.file_type} (u-law or other) "
            f"cannot be decoded by FFmpeg; {CONVERT_HINT}"
        )
    stream = with_verbatim_header(data, header, sample_rate)
    planes = []
    try:
        with av.open(io.BytesIO(stream), format="shn") as container:
            for frame in container.decode(audio=0):
                planes.append(frame.to_ndarray())
    except (av.error.FFmpegError, ValueError) as err:
        raise InputError(f"{where}: FFmpeg could not decode the shorten stream ({err}); {CONVERT_HINT}") from None
    if not planes:
        raise InputError(f"{where}: the shorten stream holds no samples; {CONVERT_HINT}")
    samples = np.concatenate(planes, axis=1).T  # FFmpeg gives planar (channels x frames)
    if len(samples) < sample_count:
        raise InputError(
            f"{where}: decoded {len(samples)} samples but the header promises {sample_count}; the file is truncated"
        )
    scale = 128.0 if header.file_type == TYPE_U8 else 32768.0
    offset = 128.0 if header.file_type == TYPE_U8 else 0.0
    return ((samples[:sample_count].astype(np.float32) - offset) / scale).astype(np.float32)
