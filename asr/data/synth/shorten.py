"""Write shorten-compressed NIST SPHERE files, as LDC ships Hub5-2000 and RT-03.

No packaged tool writes shorten (FFmpeg only decodes it), so the synthetic corpus encodes its
own: a version-2 stream of 16-bit samples with the first-order fixed predictor (each sample
coded as the difference from the previous one) and one Rice parameter per block, the simplest
stream a shorten decoder accepts. As in NIST's embedded shorten, the stream carries no
verbatim WAV header. Decoding the result with FFmpeg (asr.data.shorten) gives back the samples
exactly; tests check that, which tests both sides.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from asr.data.shorten import FN_SIZE, MAGIC, TYPE_S16HL, ULONG_SIZE

VERSION = 2
BLOCK_SIZE = 256
FN_DIFF1, FN_QUIT, FN_BLOCKSIZE = 1, 4, 5
ENERGY_SIZE = 3
SPHERE_HEADER_BYTES = 1024


class FieldWriter:
    """Collects integer fields (value, width in bits), then packs them MSB first in one go."""

    def __init__(self):
        self.values: list[np.ndarray] = []
        self.widths: list[np.ndarray] = []

    def add(self, values, widths) -> None:
        self.values.append(np.atleast_1d(np.asarray(values, dtype=np.int64)))
        self.widths.append(np.atleast_1d(np.asarray(widths, dtype=np.int64)))

    def rice(self, values, k: int) -> None:
        """Unsigned Rice codes: (value >> k) zeros, a one, then the k low bits."""
        values = np.atleast_1d(np.asarray(values, dtype=np.int64))
        high, low = values >> k, values & ((1 << k) - 1)
        self.add((1 << k) | low, high + 1 + k)

    def signed_rice(self, values, k: int) -> None:
        """Signed values: the sign in the lowest of k + 1 low bits (shorten's `var`)."""
        values = np.asarray(values, dtype=np.int64)
        self.rice(np.where(values >= 0, values << 1, ((-values - 1) << 1) | 1), k + 1)

    def ulong(self, value: int) -> None:
        width = max(int(value).bit_length(), 1)
        self.rice(width, ULONG_SIZE)
        self.rice(value, width)

    def pack(self) -> bytes:
        values, widths = np.concatenate(self.values), np.concatenate(self.widths)
        ends = np.cumsum(widths)
        bits = np.zeros((int(ends[-1]) + 7) // 8 * 8, dtype=np.uint8)  # padded to whole bytes
        significant = int(values.max()).bit_length()
        for j in range(significant):  # bit j (from the least significant) of every field at once
            has_bit = (widths > j) & (((values >> j) & 1) == 1)
            bits[ends[has_bit] - 1 - j] = 1
        return np.packbits(bits).tobytes()


def _block_energy(residuals: np.ndarray) -> int:
    """A Rice parameter close to the best for the block: about log2 of the mean magnitude."""
    mean = float(np.mean(np.abs(residuals))) if len(residuals) else 0.0
    return int(np.clip(np.floor(np.log2(mean + 1.0)), 0, 15))


def encode_shorten(samples: np.ndarray, block_size: int = BLOCK_SIZE) -> bytes:
    """int16 samples (frames x channels) -> a shorten stream (no verbatim header)."""
    frames, channels = samples.shape
    w = FieldWriter()
    w.add(int.from_bytes(MAGIC, "big"), 32)
    w.add(VERSION, 8)
    for value in (TYPE_S16HL, channels, block_size, 0, 0, 0):  # type, channels, block, LPC order, means, skip
        w.ulong(value)
    previous = np.concatenate([np.zeros((1, channels), np.int64), samples.astype(np.int64)])
    residuals = np.diff(previous, axis=0)  # first-order prediction, continuing across blocks
    size = block_size
    for start in range(0, frames, block_size):
        block = residuals[start : start + block_size]
        if len(block) < size:
            size = len(block)
            w.rice(FN_BLOCKSIZE, FN_SIZE)
            w.ulong(size)
        for channel in range(channels):
            energy = _block_energy(block[:, channel])
            w.rice(FN_DIFF1, FN_SIZE)
            w.rice(energy, ENERGY_SIZE)
            w.signed_rice(block[:, channel], energy)
    w.rice(FN_QUIT, FN_SIZE)
    return w.pack() + bytes(4)


def sphere_header(frames: int, channels: int, rate: int, coding: str, sample_bytes: int, byte_format: str) -> bytes:
    lines = [
        "NIST_1A",
        f"{SPHERE_HEADER_BYTES:7d}",
        f"sample_count -i {frames}",
        f"sample_rate -i {rate}",
        f"channel_count -i {channels}",
        f"sample_byte_format -s{len(byte_format)} {byte_format}",
        f"sample_n_bytes -i {sample_bytes}",
        f"sample_coding -s{len(coding)} {coding}",
        "end_head",
    ]
    text = ("\n".join(lines) + "\n").encode("ascii")
    return text + b" " * (SPHERE_HEADER_BYTES - len(text))


def write_shorten_sphere(path: Path, samples: np.ndarray, rate: int) -> None:
    """16-bit PCM samples (frames x channels) as `pcm,embedded-shorten-v2.00` SPHERE, as Hub5-2000 is."""
    frames, channels = samples.shape
    header = sphere_header(frames, channels, rate, "pcm,embedded-shorten-v2.00", 2, "10")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + encode_shorten(samples))
