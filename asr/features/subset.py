"""Which speakers and utterances the feature models train on, and how speakers are split
over worker processes.

Models trained on a frame budget (the fMLLR recipe's GMM, LDA+MLLT and SAT; the i-vector
recipe's UBMs) take speakers, as Kaldi's `utils/subset_data_dir.sh --speakers` does, each
giving its first frames up to an equal share, not every k-th utterance of the set: spread
thinly, a large corpus gives each speaker too few frames for a transform of its own, and
speaker-adaptive training then adapts no one.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from asr.kaldi.table import Lookup, c_sort_key, sorted_table

log = logging.getLogger("asr.features")


@dataclass
class FrameSubset:
    """The utterances a model trains on and the frames each gives: its first ones, all of them
    but for a speaker's last utterance, which is cut where the speaker's share ends, so the
    subset holds its frame budget and a model's memory is the same at every corpus size."""

    speaker_of: dict[str, str]  # utterance -> speaker, C-sorted utterances
    frames_of: dict[str, int]  # utterance -> the frames it gives

    @property
    def utts(self) -> list[str]:
        return list(self.speaker_of)

    @property
    def total_frames(self) -> int:
        return sum(self.frames_of.values())


def speaker_subset(
    num_frames: dict[str, int], utt2spk: dict[str, str], max_frames: int, min_frames: float = 0.0
) -> FrameSubset:
    """The first frames of speakers spread over the set, at most `max_frames` in all.

    Speakers with at least `min_frames` frames qualify (all of them if none does). Each chosen
    speaker gives its utterances' frames in order up to an equal share, max(min_frames,
    max_frames / qualifying speakers), so the share of speakers with enough frames for a
    transform does not fall as the corpus grows: more speakers than the budget holds means
    fewer chosen, not thinner ones."""
    by_speaker = speaker_utterances(num_frames, utt2spk)
    quotas = speaker_quotas(
        {s: sum(num_frames[u] for u in utts) for s, utts in by_speaker.items()}, max_frames, min_frames
    )
    rows = ((u, utt2spk[u], num_frames[u]) for u in sorted(num_frames, key=c_sort_key) if u in utt2spk)
    return take_frames(rows, quotas)


def streamed_subset(utt2spk: Path, utt2num_frames: Path, max_frames: int, min_frames: float = 0.0) -> FrameSubset:
    """`speaker_subset` of a set read from its sorted tables, twice in step, instead of held:
    the memory is the subset's and a few numbers per speaker."""
    quotas = speaker_quotas(speaker_frames(utt2spk, utt2num_frames), max_frames, min_frames)
    return take_frames(_frame_rows(utt2spk, utt2num_frames), quotas)


def speaker_quotas(frames: dict[str, int], max_frames: int, min_frames: float) -> dict[str, int]:
    """The chosen speakers of `frames` (speaker -> its frames, C-sorted) and the frames each gives."""
    qualifying = [s for s in frames if frames[s] >= min_frames]
    if not qualifying:
        log.warning("no speaker has %g frames; training on all %d speakers' frames", min_frames, len(frames))
        qualifying = list(frames)
    if not qualifying:
        return {}
    if min_frames * len(qualifying) <= max_frames:
        count, quota = len(qualifying), max(max_frames // len(qualifying), 1)
    else:
        count, quota = max(1, int(max_frames // min_frames)), math.ceil(min_frames)
    return {qualifying[i * len(qualifying) // count]: quota for i in range(count)}


def take_frames(rows: Iterable[tuple[str, str, int]], quotas: dict[str, int]) -> FrameSubset:
    """The subset the chosen speakers give of the (utt, speaker, frames) `rows`: each its
    utterances' frames in order until its quota is reached."""
    room = dict(quotas)
    subset = FrameSubset({}, {})
    for utt, speaker, frames in rows:
        if room.get(speaker, 0) > 0:
            subset.speaker_of[utt] = speaker
            subset.frames_of[utt] = min(frames, room[speaker])
            room[speaker] -= subset.frames_of[utt]
    return subset


def speaker_utterances(num_frames: dict[str, int], utt2spk: dict[str, str]) -> dict[str, list[str]]:
    """speaker -> its utterances with frames, both C-sorted."""
    out: dict[str, list[str]] = {}
    for utt in sorted(num_frames, key=c_sort_key):
        if utt in utt2spk:
            out.setdefault(utt2spk[utt], []).append(utt)
    return dict(sorted(out.items(), key=lambda kv: c_sort_key(kv[0])))


def split_speakers(speakers: dict[str, list[str]], num_frames: dict[str, int], jobs: int) -> list[dict[str, list[str]]]:
    """At most `jobs` parts of about equal frames: the largest speaker first to the lightest part."""
    frames = {speaker: sum(num_frames[u] for u in utts) for speaker, utts in speakers.items()}
    return [{speaker: speakers[speaker] for speaker in part} for part in balance_speakers(frames, jobs)]


def balance_speakers(frames: dict[str, int], jobs: int) -> list[list[str]]:
    """The speakers of `frames` (speaker -> its frames) in at most `jobs` parts of about equal
    frames: the largest speaker first to the lightest part."""
    jobs = max(1, min(jobs, len(frames)))
    parts: list[list[str]] = [[] for _ in range(jobs)]
    loads = [0] * jobs
    for speaker in sorted(frames, key=lambda s: -frames[s]):
        lightest = loads.index(min(loads))
        parts[lightest].append(speaker)
        loads[lightest] += frames[speaker]
    return [p for p in parts if p]


def speaker_frames(utt2spk: Path, utt2num_frames: Path) -> dict[str, int]:
    """speaker -> frames of its utterances that have features (C-sorted speakers), from the two
    sorted tables read in step, so nothing is held per utterance."""
    frames: dict[str, int] = {}
    for _, speaker, count in _frame_rows(utt2spk, utt2num_frames):
        frames[speaker] = frames.get(speaker, 0) + count
    return dict(sorted(frames.items(), key=lambda kv: c_sort_key(kv[0])))


def _frame_rows(utt2spk: Path, utt2num_frames: Path) -> Iterator[tuple[str, str, int]]:
    """(utt, speaker, frames) of the utterances with features, in key order."""
    speakers = Lookup(utt2spk)
    for _, utt, count in sorted_table(utt2num_frames):
        speaker = speakers.get(utt)
        if speaker is not None:
            yield utt, speaker, int(count)
