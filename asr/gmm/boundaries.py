"""How well an aligner places phone boundaries, against the synthetic corpus' phone timings.

The synthesiser records where eSpeak put every phone (asr/data/synth/phones.py); phone_ali
turns them into a phone per 10 ms frame (the phone under the frame's centre, `sil` where none
is). The aligner's transition ids give a phone per frame too. A *boundary* is a frame where
the phone changes, named by the pair (phone before, phone after); a reference boundary counts
as found when the alignment has a boundary with the same pair within the tolerance (20 ms: 2
frames). The accuracy is the share of reference boundaries found, over the utterances
aligned; an utterance the aligner failed counts all its boundaries as missed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from asr.data.datadir import read_data_dir
from asr.data.synth.phones import LAUGHTER, NOISE
from asr.features.logmel.fbank import FbankOptions
from asr.train.phone_ali import FrameLabeller, phone_inventory

# the corpus' names of its spliced-in sounds -> the lexicon's phones for them (Kaldi's swbd lang)
SOUND_PHONES = {NOISE: "nsn", LAUGHTER: "lau"}


def boundaries(labels: np.ndarray) -> list[tuple[int, int, int]]:
    """(frame, phone before, phone after) wherever the per-frame phone changes."""
    change = np.flatnonzero(labels[1:] != labels[:-1]) + 1
    return [(int(t), int(labels[t - 1]), int(labels[t])) for t in change]


@dataclass
class BoundaryScore:
    reference: int = 0
    found: int = 0
    utterances: int = 0
    missing_utterances: int = 0

    @property
    def accuracy(self) -> float:
        return self.found / self.reference if self.reference else 0.0

    def add(self, reference: np.ndarray, hypothesis: np.ndarray | None, tolerance: int) -> None:
        """Both in one phone-id space, one label per frame."""
        ref = boundaries(reference)
        self.reference += len(ref)
        self.utterances += 1
        if hypothesis is None:
            self.missing_utterances += 1
            return
        by_pair: dict[tuple[int, int], list[int]] = {}
        for frame, before, after in boundaries(hypothesis):
            by_pair.setdefault((before, after), []).append(frame)
        for frame, before, after in ref:
            near = by_pair.get((before, after), ())
            self.found += any(abs(frame - other) <= tolerance for other in near)

    def as_dict(self) -> dict:
        return {
            "reference_boundaries": self.reference,
            "found": self.found,
            "accuracy": self.accuracy,
            "utterances": self.utterances,
            "unaligned_utterances": self.missing_utterances,
        }


def boundary_accuracy(
    ms98_dir: Path,
    data_dir: Path,
    utterances: Iterable[str],
    alignments: Iterable[tuple[str, np.ndarray]],
    phone_of_tid: np.ndarray,
    lang_phones: dict[str, int],
    tolerance_frames: int = 2,
    opts: FbankOptions | None = None,
) -> BoundaryScore:
    """Score the (utt, transition ids) alignments of `utterances` of the data dir. `phone_of_tid`
    maps transition ids to the lang's phone ids; the timings' phone names map to the lang's by
    name (noise and laughter to nsn and lau)."""
    opts = opts or FbankOptions(sample_frequency=8000.0)
    timing_ids = phone_inventory(ms98_dir)
    labeller = FrameLabeller(ms98_dir, timing_ids, opts)
    to_lang = np.full(len(timing_ids), -1, np.int64)
    for name, index in timing_ids.items():
        to_lang[index] = lang_phones.get(SOUND_PHONES.get(name, name), -1 - index)  # unknown: never matches
    segments = read_data_dir(data_dir, tables=("utt2spk", "segments")).segments
    aligned = dict(alignments)
    score = BoundaryScore()
    for utt in utterances:  # the aligner's, so that those it failed count as misses
        segment = segments.get(utt)
        if segment is None:
            continue
        reference = to_lang[labeller(segment.recording, segment.start, segment.end)]
        tids = aligned.get(utt)
        hypothesis = phone_of_tid[tids] if tids is not None and len(tids) == len(reference) else None
        score.add(reference, hypothesis, tolerance_frames)
    return score
