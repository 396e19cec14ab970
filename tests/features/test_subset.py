"""The feature models' training subsets: whole speakers with enough frames each, whatever the
corpus size, and speakers split over worker processes."""

from collections import Counter

import pytest

from asr.features.subset import speaker_subset, speaker_utterances, split_speakers

UTTERANCE_FRAMES = (150, 230, 310, 120, 400)


def corpus(sides: int, utts_per_side: int = 12) -> tuple[dict[str, int], dict[str, str]]:
    """`sides` conversation sides with utterances of 120-400 frames (~2,800 frames per side)."""
    num_frames, utt2spk = {}, {}
    for side in range(sides):
        speaker = f"sw{side:05d}-A"
        for i in range(utts_per_side):
            utt = f"{speaker}_{i:04d}"
            num_frames[utt] = UTTERANCE_FRAMES[(side + i) % len(UTTERANCE_FRAMES)]
            utt2spk[utt] = speaker
    return num_frames, utt2spk


@pytest.mark.parametrize("sides", [72, 231, 536])
def test_every_chosen_speaker_has_enough_frames_for_fmllr_whatever_the_corpus_size(sides):
    """The corpus sizes of the issue (40, 120, 360 synthetic conversations): a fixed budget of
    100,000 frames spread over all utterances gave 500 frames or more to 71 of 72, 43 of 231 and
    0 of 536 sides; whole speakers give every chosen one at least fMLLR's 500."""
    num_frames, utt2spk = corpus(sides)
    utts = speaker_subset(num_frames, utt2spk, max_frames=100_000, min_frames=500)
    per_speaker = Counter()
    for utt in utts:
        per_speaker[utt2spk[utt]] += num_frames[utt]
    assert min(per_speaker.values()) >= 500
    assert len(per_speaker) == min(sides, 100_000 // 500)
    assert sum(per_speaker.values()) <= 100_000 + len(per_speaker) * max(UTTERANCE_FRAMES)
    assert utts == sorted(utts, key=lambda u: u.encode())


def test_speakers_below_the_minimum_are_passed_over_and_the_choice_is_spread():
    num_frames, utt2spk = corpus(40)
    for utt in [u for u in num_frames if utt2spk[u] < "sw00010"]:
        num_frames[utt] = 10  # ten speakers with 120 frames
    chosen = {utt2spk[u] for u in speaker_subset(num_frames, utt2spk, max_frames=10_000, min_frames=1000)}
    assert chosen and all(s >= "sw00010" for s in chosen)
    assert len(chosen) == 10 and max(chosen) > "sw00030"  # spread over the qualifying speakers, not the first ten


def test_no_speaker_qualifying_falls_back_to_all_of_them():
    num_frames, utt2spk = corpus(5, utts_per_side=2)
    utts = speaker_subset(num_frames, utt2spk, max_frames=100_000, min_frames=10_000)
    assert set(utts) == set(num_frames)


def test_split_speakers_balances_frames():
    num_frames, utt2spk = corpus(7)
    speakers = speaker_utterances(num_frames, utt2spk)
    parts = split_speakers(speakers, num_frames, 3)
    assert len(parts) == 3 and sorted(s for p in parts for s in p) == sorted(speakers)
    loads = [sum(num_frames[u] for utts in p.values() for u in utts) for p in parts]
    assert max(loads) - min(loads) <= max(sum(num_frames[u] for u in utts) for utts in speakers.values())
