"""How well an aligner places phone boundaries, against the synthetic corpus' phone timings.

The synthesiser records where eSpeak put every phone (asr/data/synth/phones.py); phone_ali
turns them into a phone per 10 ms frame (the phone under the frame's centre, `sil` where none
is). The aligner's transition ids give a phone per frame too. A *boundary* is a frame where
the phone changes, named by the pair (phone before, phone after); a reference boundary counts
as found when the alignment has a boundary with the same pair within the tolerance (20 ms: 2
frames). The accuracy is the share of reference boundaries found, over the utterances
aligned; an utterance the aligner failed counts all its boundaries as missed.

That strict score also counts as missed every boundary next to a phone the alignment names
differently: the lexicon offers several pronunciations (one per eSpeak accent, and words as
said in context) and the aligner may pick `d` where eSpeak said `D`, though it puts the
boundaries right. The *matched* score separates timing from that choice, as forced-alignment
evaluations do when the phone sequences differ: the two sequences of phone runs are aligned
(Levenshtein, runs as symbols), and a reference boundary between runs i and i+1 corresponds to
the hypothesis boundary between the runs j and j+1 they are aligned to (matched or
substituted); it is found when that one is within the tolerance. A boundary next to a phone
the alignment left out or added (a short pause it skipped, an extra `l`) has no counterpart
and counts as missed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from asr.data.datadir import read_data_dir
from asr.data.synth.phones import LAUGHTER, NOISE
from asr.features.logmel.options import FbankOptions
from asr.train.phone_ali import FrameLabeller, phone_inventory

# the corpus' names of its spliced-in sounds -> the lexicon's phones for them (Kaldi's swbd lang)
SOUND_PHONES = {NOISE: "nsn", LAUGHTER: "lau"}


def run_starts(labels: np.ndarray) -> np.ndarray:
    """Frames where a run of one phone starts (the first frame included)."""
    return np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]])


def aligned_runs(ref: np.ndarray, hyp: np.ndarray) -> list[tuple[int, int]]:
    """(i, j) for each reference run i matched or substituted to hypothesis run j, in order:
    the Levenshtein alignment of the two sequences of run labels (ties prefer the diagonal)."""
    n, m = len(ref), len(hyp)
    cost = np.zeros((n + 1, m + 1), np.int32)
    cost[:, 0], cost[0, :] = np.arange(n + 1), np.arange(m + 1)
    for i in range(1, n + 1):
        diagonal = cost[i - 1, :-1] + (hyp != ref[i - 1])
        row = np.minimum(diagonal, cost[i - 1, 1:] + 1)
        for j in range(1, m + 1):  # insertions run along the row
            row[j - 1] = min(row[j - 1], cost[i, j - 1] + 1)
            cost[i, j] = row[j - 1]
    pairs, i, j = [], n, m
    while i and j:
        if cost[i, j] == cost[i - 1, j - 1] + (ref[i - 1] != hyp[j - 1]):
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif cost[i, j] == cost[i - 1, j] + 1:
            i -= 1
        else:
            j -= 1
    return pairs[::-1]


def matched_found(reference: np.ndarray, hypothesis: np.ndarray, tolerance: int) -> int:
    """Reference boundaries whose counterpart in the aligned run sequences is within `tolerance`."""
    ref_starts, hyp_starts = run_starts(reference), run_starts(hypothesis)
    pairs = aligned_runs(reference[ref_starts], hypothesis[hyp_starts])
    found = 0
    for (i, j), (next_i, next_j) in zip(pairs, pairs[1:]):
        if next_i == i + 1 and next_j == j + 1:
            found += abs(int(ref_starts[next_i]) - int(hyp_starts[next_j])) <= tolerance
    return found


def boundaries(labels: np.ndarray) -> list[tuple[int, int, int]]:
    """(frame, phone before, phone after) wherever the per-frame phone changes."""
    change = np.flatnonzero(labels[1:] != labels[:-1]) + 1
    return [(int(t), int(labels[t - 1]), int(labels[t])) for t in change]


@dataclass
class BoundaryScore:
    reference: int = 0
    found: int = 0
    matched: int = 0  # found by the matched score (module doc)
    utterances: int = 0
    missing_utterances: int = 0

    @property
    def accuracy(self) -> float:
        return self.found / self.reference if self.reference else 0.0

    @property
    def matched_accuracy(self) -> float:
        return self.matched / self.reference if self.reference else 0.0

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
        self.matched += matched_found(reference, hypothesis, tolerance)

    def as_dict(self) -> dict:
        return {
            "reference_boundaries": self.reference,
            "found": self.found,
            "accuracy": self.accuracy,
            "matched": self.matched,
            "matched_accuracy": self.matched_accuracy,
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
