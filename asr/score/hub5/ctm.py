"""Hypothesis CTM files and the standard Hub5 filtering before scoring.

A CTM line is `file channel start duration word [confidence]`. Before scoring, the way
Kaldi's and ESPnet's local/score_sclite.sh do it, the hypothesis drops noise tags
(`[noise]`, `[laughter]`, `[vocalized-noise]`), `<unk>`, the hesitations the GLM would map
to %HESITATION (uh, um, ...: asr.score.normalize.FILLERS) and partial words ending in `-`;
the reference marks all of these optionally deletable, so producing them could only add
errors.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from asr.score.normalize import is_filler, is_noise_tag, is_non_lexical_marker
from asr.utils.atomic import atomic_open
from asr.utils.errors import InputError


@dataclass(frozen=True)
class CtmWord:
    file: str
    channel: str
    start: float
    duration: float
    word: str
    confidence: str = ""

    def __str__(self) -> str:
        conf = f" {self.confidence}" if self.confidence else ""
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
            words.append(CtmWord(fields[0], fields[1], float(fields[2]), float(fields[3]), fields[4], fields[5] if len(fields) == 6 else ""))
        except ValueError:
            raise InputError(f"{source}:{lineno}: expected `file channel start duration word [confidence]`, got {line.strip()!r}") from None
    return words


def read_ctm(path: str | os.PathLike, allow_empty: bool = False) -> list[CtmWord]:
    """The words of a hypothesis CTM. An empty one is an error unless `allow_empty` (the
    caller knows the decoder ran and simply hypothesised no word)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: hypothesis CTM not found; run the decode stage for this set")
    words = parse_ctm(path.read_text(encoding="utf-8"), str(path))
    if not words and not allow_empty:
        raise InputError(f"{path}: the hypothesis CTM has no words; re-run the decode stage (scoring it would report 100% deletions)")
    return words


def is_scored_hyp_word(word: str) -> bool:
    """Whether a hypothesis word survives the standard filter (case-insensitive)."""
    w = word.lower()
    return not (is_noise_tag(w) or is_non_lexical_marker(w) or is_filler(w) or w.endswith("-"))


def filter_ctm(words: list[CtmWord]) -> list[CtmWord]:
    return [w for w in words if is_scored_hyp_word(w.word)]


def write_ctm_words(path: str | os.PathLike, words: list[CtmWord]) -> None:
    with atomic_open(path, encoding="utf-8") as f:
        f.writelines(f"{w}\n" for w in words)
