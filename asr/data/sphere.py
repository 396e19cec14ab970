"""NIST SPHERE headers, read directly.

libsndfile reports the length of a truncated SPHERE file from the bytes present and reads
it without complaint, and it cannot open shorten-compressed files at all. The header says
how many samples the file should hold, whatever the coding, so we read it ourselves: it
gives the recording's real duration and, for uncompressed files, the size the file must have.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from asr.utils.errors import InputError

MAGIC = b"NIST_1A"


@dataclass(frozen=True)
class SphereHeader:
    header_bytes: int
    sample_count: int
    sample_rate: int
    channel_count: int
    sample_n_bytes: int
    sample_coding: str

    @property
    def duration(self) -> float:
        return self.sample_count / self.sample_rate

    @property
    def compressed(self) -> bool:
        """Shorten (and other packed) codings: the file size says nothing about the length."""
        return "shorten" in self.sample_coding or "wavpack" in self.sample_coding or "shortpack" in self.sample_coding

    @property
    def shorten(self) -> bool:
        """`pcm,embedded-shorten-v2.00` and the like: decodable through asr.data.shorten."""
        return "shorten" in self.sample_coding

    @property
    def expected_file_bytes(self) -> int:
        return self.header_bytes + self.sample_count * self.channel_count * self.sample_n_bytes


def is_sphere(path: str | os.PathLike) -> bool:
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


def _header_fields(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines()[2:]:
        if line.strip() == "end_head":
            break
        parts = line.split(maxsplit=2)
        if len(parts) == 3:
            fields[parts[0]] = parts[2].strip()
    return fields


def read_sphere_header(path: str | os.PathLike) -> SphereHeader:
    """Parse the header of a NIST SPHERE file; InputError if it is not one or is damaged."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(1024)
    lines = head.split(b"\n", 2)
    if lines[0] != MAGIC or len(lines) < 2:
        raise InputError(f"{path}: not a NIST SPHERE file (no NIST_1A header)")
    try:
        header_bytes = int(lines[1])
        if header_bytes > len(head):
            with open(path, "rb") as f:
                head = f.read(header_bytes)
        fields = _header_fields(head[:header_bytes].decode("ascii", errors="replace"))
        header = SphereHeader(
            header_bytes=header_bytes,
            sample_count=int(fields["sample_count"]),
            sample_rate=int(fields["sample_rate"]),
            channel_count=int(fields.get("channel_count", "1")),
            sample_n_bytes=int(fields.get("sample_n_bytes", "2")),
            sample_coding=fields.get("sample_coding", "pcm").lower(),
        )
    except (KeyError, ValueError) as err:
        raise InputError(f"{path}: damaged SPHERE header ({err!r} missing or malformed)") from None
    _check_header_values(path, header)
    return header


def _check_header_values(path: Path, header: SphereHeader) -> None:
    """Numbers that parse but cannot be right (a rate of 0 would divide by zero later)."""
    for name, value, smallest in (
        ("header size", header.header_bytes, len(MAGIC) + 1),
        ("sample_count", header.sample_count, 0),
        ("sample_rate", header.sample_rate, 1),
        ("channel_count", header.channel_count, 1),
        ("sample_n_bytes", header.sample_n_bytes, 1),
    ):
        if value < smallest:
            raise InputError(
                f"{path}: damaged SPHERE header: {name} {value} (must be at least {smallest}); "
                "copy the file again from the corpus"
            )


def sphere_size_problem(path: str | os.PathLike, header: SphereHeader) -> str | None:
    """A message when an uncompressed file is shorter (truncated) or longer than its header says."""
    if header.compressed:
        return None
    actual = Path(path).stat().st_size
    expected = header.expected_file_bytes
    if actual < expected:
        have = (actual - header.header_bytes) / (header.channel_count * header.sample_n_bytes * header.sample_rate)
        return (
            f"truncated: the header promises {header.duration:.2f}s ({expected} bytes) but the file has "
            f"{actual} bytes ({max(have, 0):.2f}s); copy the file again from the corpus"
        )
    return None
