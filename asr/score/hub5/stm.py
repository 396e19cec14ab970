"""Reference segments of an stm file, in the order sclite scores them.

`en_4156 A en_4156_A 357.64 359.64 <O,en,F,en-F> HE IS A POLICE OFFICER`: file, channel,
speaker, start, end, optional label, text; `;;` lines are comments. The stm is first fixed
the way Kaldi fixes it for hubscr.pl (asr.data.hub5.fix_stm: `((` typos, aside tags).
Segments are sorted by file, channel and start time, as hubscr.pl sorts them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from asr.data.hub5 import fix_stm
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
    label: str
    text: str

    @property
    def ignored(self) -> bool:
        """sclite drops the hypothesis words falling in these segments and scores nothing."""
        return any(marker in self.text.upper() for marker in IGNORE_MARKERS)


def parse_stm(text: str, source: str = "stm") -> list[StmSegment]:
    segments = []
    for lineno, line in enumerate(fix_stm(text).splitlines(), 1):
        if not line.strip() or line.lstrip().startswith(";;"):
            continue
        fields = line.split()
        try:
            start, end = float(fields[3]), float(fields[4])
        except (IndexError, ValueError):
            raise InputError(f"{source}:{lineno}: expected `file channel speaker start end [<label>] words`, got {line.strip()!r}") from None
        rest = fields[5:]
        label = rest.pop(0) if rest and rest[0].startswith("<") and rest[0].endswith(">") else ""
        segments.append(StmSegment(fields[0], fields[1], fields[2], start, end, label, " ".join(rest)))
    return sorted(segments, key=lambda s: (s.file, s.channel, s.start))  # stable, as hubscr's sortSTM


def read_stm(path: str | os.PathLike) -> list[StmSegment]:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: reference stm not found; the Hub5 prepare stage writes it into the data dir")
    segments = parse_stm(read_text(path), str(path))
    if not segments:
        raise InputError(f"{path}: no reference segments")
    return segments
