"""Kaldi's `segments` and `utt2dur` values, parsed in one place: strictly for a stage (an
InputError naming the line), or as a message for the validator and the fixer."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from asr.kaldi.table import iter_table
from asr.utils.errors import InputError


@dataclass(frozen=True)
class Segment:
    recording: str
    start: float
    end: float

    def __str__(self) -> str:
        return f"{self.recording} {self.start:.2f} {self.end:.2f}"

    @property
    def duration(self) -> float:
        """Its utt2dur value (Kaldi's get_utt2dur.sh does the same with segments)."""
        return round(self.end - self.start, 3)


def segment_fields(value: str) -> Segment | None:
    """A segments line's value (`<recording> <start> <end>`), or None when it is not that."""
    fields = value.split()
    try:
        return Segment(fields[0], float(fields[1]), float(fields[2]))
    except (IndexError, ValueError):
        return None


def _format_problem(utt: str, value: str) -> str:
    return f"expected '<utt> <recording> <start> <end>', got {utt} {value!r}"


def segment_problem(utt: str, value: str) -> str | None:
    """What is wrong with a segments line (its format, or times not 0 <= start < end), or None."""
    segment = segment_fields(value)
    if segment is None:
        return _format_problem(utt, value)
    start, end = segment.start, segment.end
    if len(value.split()) != 3 or not (0 <= start < end) or not math.isfinite(end):
        return f"bad times for {utt}: start {start} end {end} (need 0 <= start < end)"
    return None


def valid_segment(utt: str, value: str) -> Segment | None:
    """The segment, or None when segment_problem has something to say about the line."""
    return None if segment_problem(utt, value) else segment_fields(value)


def parse_segment(path: Path, lineno: int, utt: str, value: str) -> Segment:
    """A segments line's value; InputError naming the line if it is not `<recording> <start> <end>`."""
    segment = segment_fields(value)
    if segment is None:
        raise InputError(f"{path}:{lineno}: {_format_problem(utt, value)}")
    return segment


def parse_duration(path: Path, lineno: int, utt: str, value: str) -> float:
    """An utt2dur line's value; InputError naming the line if it is not a number."""
    try:
        return float(value)
    except ValueError:
        raise InputError(f"{path}:{lineno}: expected '<utt> <seconds>', got {utt} {value!r}") from None


def positive_duration(value: str) -> float | None:
    """A duration that is a finite positive number, or None."""
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number > 0 and math.isfinite(number) else None


def read_segments(path: Path) -> dict[str, Segment]:
    segments = {}
    for lineno, key, rest in iter_table(path):
        segment = parse_segment(path, lineno, key, rest)
        if key in segments:
            raise InputError(f"{path}:{lineno}: duplicate utterance {key!r}")
        segments[key] = segment
    return segments


def read_durations(path: Path) -> dict[str, float]:
    return {key: parse_duration(path, lineno, key, value) for lineno, key, value in iter_table(path)}
