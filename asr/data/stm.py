"""NIST's stm format (segment time marks): the reference transcripts Hub5 is scored against.

    en_4156 A en_4156_A 357.64 359.64 <O,en,F,en-F> HE IS A POLICE OFFICER

file, channel, speaker, start, end, an optional label and the words. Read as NIST's sclite
reads it, which is what finally scores a system, so that data preparation and scoring agree
on the segments:
  * a comment is a line that starts with `;;` (a `;;` later in a line is part of its text);
  * the field after the times is a label when it is enclosed in angle brackets (`<O>` as much
    as `<O,en,F,en-F>`); Kaldi's eval2000 prep drops that field unconditionally, which is the
    same on LDC's reference, where every line has one.
Channel and speaker are free text here; the Hub5 preparation checks its own rules (sides A/B).

`fix_stm` makes Kaldi's repairs of the LDC reference so that hubscr.pl accepts it: `((` typos
become `(` and the <B_ASIDE>/<E_ASIDE> tags are removed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from asr.utils.errors import InputError
from asr.utils.textfile import read_text

IGNORE_MARKERS = ("IGNORE_TIME_SEGMENT_IN_SCORING", "IGNORETIMESEGMENTINSCORING")


@dataclass(frozen=True)
class StmSegment:
    file: str
    channel: str
    speaker: str
    start: float
    end: float
    label: str  # "<...>" or ""
    text: str
    where: str = ""  # "path:line", for messages

    @property
    def ignored(self) -> bool:
        """sclite drops the hypothesis words falling in these segments and scores nothing."""
        return any(marker in self.text.upper() for marker in IGNORE_MARKERS)


def is_label(field: str) -> bool:
    return len(field) >= 2 and field.startswith("<") and field.endswith(">")


def parse_stm(text: str, source: str = "stm") -> list[StmSegment]:
    """The segments of an stm's text, in file order."""
    segments = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith(";;"):
            continue
        fields = line.split()
        where = f"{source}:{lineno}"
        try:
            if len(fields) < 5:
                raise ValueError
            start, end = float(fields[3]), float(fields[4])
        except ValueError:
            raise InputError(
                f"{where}: expected `file channel speaker start end [<label>] words`, got {line.strip()!r}"
            ) from None
        rest = fields[5:]
        label = rest.pop(0) if rest and is_label(rest[0]) else ""
        segments.append(StmSegment(fields[0], fields[1], fields[2], start, end, label, " ".join(rest), where))
    return segments


def read_stm(path: str | os.PathLike) -> list[StmSegment]:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: stm not found")
    return parse_stm(read_text(path), str(path))


def fix_stm(stm: str) -> str:
    """Kaldi's repairs so that hubscr.pl accepts the stm: `((` typos -> `(`, aside tags removed."""
    return re.sub(r"<[BE]_ASIDE>", "", stm.replace("((", "("))
