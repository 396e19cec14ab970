"""Word times from a decoder's best path: its transition ids cut into phones, the phones matched
to the decoded words' pronunciations (what Kaldi's lattice-align-words-lexicon does for one path).

A WFST decoder's output labels are not time-aligned: determinization and minimization move a
word's label to wherever the graph is still unambiguous. The transition ids are exact, though:
each frame's id names its phone, and the id of a phone's last frame is the one that leaves its
HMM (`is_final`). The words are then laid over the phone sequence in order, each taking one of
its pronunciations; the optional silence between words belongs to no word.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Collection, Mapping, Sequence

from asr.utils.errors import InputError


@dataclass(frozen=True)
class PhoneSegment:
    phone: int
    start: int  # first frame
    end: int  # one past the last frame


@dataclass(frozen=True)
class WordSpan:
    word: int
    start: int
    end: int


def is_reordered(tids: Sequence[int], trans_model) -> bool:
    """Whether a path has its self-loops after the forward transition (a graph built with
    add-self-loops --reorder, Kaldi's default), told as Kaldi's IsReordered does: at the first
    change of transition state next to a self-loop, a self-loop before it means reordered."""
    state = trans_model.id2state
    for this, following in zip(tids, tids[1:]):
        if state[this] != state[following]:
            if trans_model.is_self_loop(this):
                return True
            if trans_model.is_self_loop(following):
                return False
    return bool(tids) and not trans_model.is_self_loop(int(tids[0])) and trans_model.is_self_loop(int(tids[-1]))


def phone_segments(tids: Sequence[int], trans_model, partial: bool = False) -> list[PhoneSegment]:
    """The phones of a transition-id path, as Kaldi's SplitToPhones: each ends at the frame whose
    id leaves its HMM (and, reordered, the self-loops after it). A partial path (the decoder
    reached no final state) may end inside its last phone."""
    tids = [int(t) for t in tids]
    reordered = is_reordered(tids, trans_model)
    segments: list[PhoneSegment] = []
    start = frame = 0
    while frame < len(tids):
        if trans_model.is_final(tids[frame]):
            while reordered and frame + 1 < len(tids) and trans_model.is_self_loop(tids[frame + 1]):
                frame += 1
            segments.append(PhoneSegment(trans_model.transition_id_to_phone(tids[frame]), start, frame + 1))
            start = frame + 1
        frame += 1
    if start != len(tids) and partial:
        segments.append(PhoneSegment(trans_model.transition_id_to_phone(tids[-1]), start, len(tids)))
    elif start != len(tids):
        raise InputError(f"a path of {len(tids)} frames ends inside a phone (frame {start}); is it a complete path?")
    return segments


def word_spans(
    words: Sequence[int],
    segments: Sequence[PhoneSegment],
    prons: Mapping[int, Collection[tuple[int, ...]]],
    optional_silence: int,
    partial: bool = False,
) -> list[WordSpan]:
    """Each word's first and last frame: the words over the phones in order, each spelling one of
    its pronunciations, the optional silence phone allowed between them; on a partial path the
    last word may be cut short. InputError if the phones cannot spell the words (a path that is
    not from the lexicon's graph)."""
    phones = tuple(segment.phone for segment in segments)

    @lru_cache(maxsize=None)
    def match(word_index: int, at: int) -> tuple[int, ...] | None:
        """(start, phone count) of each word from word_index on, spelled from phone `at` on;
        None if they cannot be."""
        if word_index == len(words):
            return () if all(p == optional_silence for p in phones[at:]) else None
        last = word_index == len(words) - 1
        for pron in prons.get(words[word_index], ()):
            if partial and last and at < len(phones) and pron[: len(phones) - at] == phones[at:]:
                return (at, len(phones) - at)
            if phones[at : at + len(pron)] == pron:
                rest = match(word_index + 1, at + len(pron))
                if rest is not None:
                    return (at, len(pron)) + rest
        if at < len(phones) and phones[at] == optional_silence:
            return match(word_index, at + 1)
        return None

    layout = match(0, 0)
    if layout is None:
        raise InputError(f"the phones {list(phones)} do not spell the words {list(words)} with the lexicon")
    return [
        WordSpan(word, segments[at].start, segments[at + count - 1].end)
        for word, at, count in zip(words, layout[0::2], layout[1::2])
    ]
