"""NIST's CTM format (time-marked conversation): the hypothesis words decoding hands to scoring.

    sw_4910 A 12.34 0.25 HELLO 0.97

file, channel, start, duration (seconds), word and an optional confidence; `;;` lines are
comments. Written sorted by file, channel and start time (stable: the word order of ties is
kept), as sclite reads it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from asr.utils.atomic import atomic_open
from asr.utils.errors import InputError


@dataclass(frozen=True)
class CtmWord:
    file: str
    channel: str
    start: float
    duration: float
    word: str
    confidence: float | None = None

    def __str__(self) -> str:
        conf = f" {self.confidence:.2f}" if self.confidence is not None else ""
        return f"{self.file} {self.channel} {self.start:.2f} {self.duration:.2f} {self.word}{conf}"


def parse_ctm(text: str, source: str = "ctm") -> list[CtmWord]:
    words = []
    for lineno, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or line.lstrip().startswith(";;"):
            continue
        try:
            if len(fields) not in (5, 6):
                raise ValueError
            confidence = float(fields[5]) if len(fields) == 6 else None
            words.append(CtmWord(fields[0], fields[1], float(fields[2]), float(fields[3]), fields[4], confidence))
        except ValueError:
            raise InputError(
                f"{source}:{lineno}: expected `file channel start duration word [confidence]`, got {line.strip()!r}"
            ) from None
    return words


def read_ctm(path: str | os.PathLike, allow_empty: bool = False) -> list[CtmWord]:
    """The words of a hypothesis CTM. An empty one is an error unless `allow_empty` (the
    caller knows the decoder ran and simply hypothesised no word)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: hypothesis CTM not found; run the decode stage for this set")
    words = parse_ctm(path.read_text(encoding="utf-8"), str(path))
    if not words and not allow_empty:
        raise InputError(
            f"{path}: the hypothesis CTM has no words; re-run the decode stage (scoring it would report 100% deletions)"
        )
    return words


def write_ctm(path: str | os.PathLike, words: list[CtmWord]) -> None:
    ordered = sorted(words, key=lambda w: (w.file.encode(), w.channel.encode(), round(w.start, 2)))
    with atomic_open(path, encoding="utf-8") as f:
        f.writelines(f"{word}\n" for word in ordered)
