"""A corpus' utterances kept in a temporary file, to be read back as often as needed.

The prepare stage reads Switchboard (and Fisher) through once, which logs what was left out and
stops on a broken corpus before any data dir is written; it then reads the utterances back for
the dev split, the training set, the duplicate cap and the LM text, one at a time, so that its
memory does not grow with the number of utterances. One line an utterance:
`<utt> <speaker> <recording> <start> <end> <text>` (ids and times have no spaces, the
normalised text has no newline).
"""

from __future__ import annotations

import tempfile
from itertools import islice
from pathlib import Path
from typing import Iterator

from asr.data.datadir import StreamedDataDir, Utterance
from asr.kaldi.segments import Segment


class Spool:
    """The utterances of `d`, in their order, in a temporary file removed on close."""

    def __init__(self, d: StreamedDataDir):
        self.recordings = d.recordings
        self._dir = tempfile.TemporaryDirectory(prefix="asr-prepare-")
        self.path = Path(self._dir.name) / "utterances"
        self.count = 0
        with open(self.path, "w", encoding="utf-8", newline="\n") as f:
            for u in d:
                s = u.segment
                f.write(f"{u.utt} {u.speaker} {s.recording} {s.start!r} {s.end!r} {u.text}\n")
                self.count += 1

    def __len__(self) -> int:
        return self.count

    def _read(self, start: int, stop: int | None) -> Iterator[Utterance]:
        with open(self.path, encoding="utf-8", newline="\n") as f:
            for line in islice(f, start, stop):
                utt, speaker, recording, begin, end, text = line[:-1].split(" ", 5)
                yield Utterance(utt, speaker, Segment(recording, float(begin), float(end)), text)

    def part(self, start: int = 0, stop: int | None = None) -> StreamedDataDir:
        """The utterances from `start` up to `stop` (all by default), read afresh at each pass."""
        return StreamedDataDir(self.recordings, lambda: self._read(start, stop))

    def close(self) -> None:
        self._dir.cleanup()

    def __enter__(self) -> "Spool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
