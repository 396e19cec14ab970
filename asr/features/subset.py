"""Which speakers and utterances the feature models train on, and how speakers are split
over worker processes.

Models trained on a frame budget (the fMLLR recipe's GMM, LDA+MLLT and SAT; the i-vector
recipe's UBMs) take whole speakers, as Kaldi's `utils/subset_data_dir.sh --speakers` does, not
every k-th utterance of the set: spread thinly, a large corpus gives each speaker too few
frames for a transform of its own, and speaker-adaptive training then adapts no one.
"""

from __future__ import annotations

import logging
from pathlib import Path

from asr.data.datadir import Lookup, c_sort_key, sorted_table

log = logging.getLogger("asr.features")


def speaker_subset(num_frames: dict[str, int], utt2spk: dict[str, str], max_frames: int,
                   min_frames: float = 0.0) -> list[str]:
    """Utterances (C-sorted) of speakers spread over the set, about `max_frames` in all.

    Speakers with at least `min_frames` frames qualify (all of them if none does). Each chosen
    speaker gives its utterances in order up to an equal share, max(min_frames, max_frames /
    qualifying speakers), so the share of speakers with enough frames for a transform does not
    fall as the corpus grows: more speakers than the budget holds means fewer chosen, not
    thinner ones."""
    by_speaker = speaker_utterances(num_frames, utt2spk)
    totals = {s: sum(num_frames[u] for u in utts) for s, utts in by_speaker.items()}
    qualifying = [s for s in by_speaker if totals[s] >= min_frames]
    if not qualifying:
        log.warning("no speaker has %g frames; training on all %d speakers' frames", min_frames, len(by_speaker))
        qualifying = list(by_speaker)
    if not qualifying:
        return []
    if min_frames * len(qualifying) <= max_frames:
        count, quota = len(qualifying), max(max_frames / len(qualifying), 1.0)
    else:
        count, quota = max(1, int(max_frames // min_frames)), min_frames
    chosen = [qualifying[i * len(qualifying) // count] for i in range(count)]
    utts: list[str] = []
    for speaker in chosen:
        taken = 0
        for utt in by_speaker[speaker]:
            if taken >= quota:
                break
            utts.append(utt)
            taken += num_frames[utt]
    return sorted(utts, key=c_sort_key)


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
    speakers = Lookup(utt2spk)
    frames: dict[str, int] = {}
    for _, utt, count in sorted_table(utt2num_frames):
        speaker = speakers.get(utt)
        if speaker is not None:
            frames[speaker] = frames.get(speaker, 0) + int(count)
    return dict(sorted(frames.items(), key=lambda kv: c_sort_key(kv[0])))
