"""The Hub5 scorer in Python: what hubscr.pl + csrfilt.sh + sclite do with an stm, a CTM
and a GLM, for when SCTK is not installed.

1. Both sides go through the GLM (csrfilt.sh -dh: asr.score.hub5.glm.filter_text), the
   reference as stm/ref, each hypothesis word on its own as ctm/hyp. A hypothesis word that
   becomes several words shares its duration among them; one that becomes an alternation
   is one item whose time is the latest midpoint of its words (sclite's rule).
2. Hypothesis words are assigned to reference segments per conversation side, in time
   order, as sclite's segment_hyp_for_utt does: a segment takes every remaining word whose
   midpoint is before its end (so words between segments go to the next one), the last
   segment of a side takes all that is left, and words of IGNORE_TIME_SEGMENT_IN_SCORING
   segments are dropped.
3. Each segment is aligned with sclite's weights (asr.score.hub5.align); segment ids are
   sclite's `<speaker>-NNN`, so subsets (sw_/en_) and speakers are those of sclite's reports.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass

from asr.data.ctm import CtmWord
from asr.data.stm import StmSegment
from asr.score.hub5.align import align_networks
from asr.score.hub5.glm import Glm, GlmMapper, filter_text
from asr.score.hub5.network import Network, Word, parse_transcript
from asr.score.result import AlignedWord, ScoreResult, UttAlignment
from asr.utils.errors import InputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HypItem:
    mid: float  # midpoint time deciding the segment
    network: Network


def _rounded(x: float) -> float:
    return round(x, 3)  # csrfilt prints expanded CTM times with %.3f


def hyp_items(word: CtmWord, mapper: GlmMapper) -> list[HypItem]:
    """One CTM word after the GLM and hyphen splitting: one item per word, or one alternation."""
    text = filter_text(word.word, mapper)
    if "{" in text:  # csrfilt: the sets between '/' share the word's duration each
        sets = [s.replace("{", " ").replace("}", " ").split() for s in text.split("/")]
        mids, alternatives = [], []
        for words in sets:
            dur = _rounded(word.duration / max(len(words), 1))
            mids += [_rounded(word.start + dur * i) + dur / 2 for i in range(len(words))]
            alternatives.append([Word(w) for w in words if w != "@"])
        net = Network()
        net.append_alternation(alternatives)
        return [HypItem(max(mids, default=word.start + word.duration / 2), net)]
    words = text.split()
    dur = word.duration if len(words) == 1 else _rounded(word.duration / len(words))
    items = []
    for i, w in enumerate(words):
        net = Network()
        net.append_word(Word(w))
        start = word.start if len(words) == 1 else _rounded(word.start + dur * i)
        items.append(HypItem(start + dur / 2, net))
    return items


def items_by_side(words: list[CtmWord], mapper: GlmMapper) -> dict[tuple[str, str], list[HypItem]]:
    by_side: dict[tuple[str, str], list[HypItem]] = defaultdict(list)
    for word in sorted(words, key=lambda w: (w.file, w.channel, w.start)):  # hubscr's sortCTM (stable)
        by_side[(word.file, word.channel)].extend(hyp_items(word, mapper))
    return by_side


def scoring_order(segments: list[StmSegment]) -> list[StmSegment]:
    """By file, channel and start time, as hubscr.pl sorts the stm (stable)."""
    return sorted(segments, key=lambda s: (s.file, s.channel, s.start))


def assign_to_segments(segments: list[StmSegment], items: list[HypItem]) -> list[list[HypItem]]:
    """sclite's segment_hyp_for_utt over one conversation side (segments in time order)."""
    assigned, pos = [], 0
    for index, segment in enumerate(segments):
        if index == len(segments) - 1:
            taken = items[pos:]
        else:
            end = pos
            while end < len(items) and items[end].mid < segment.end:
                end += 1
            taken = items[pos:end]
        pos += len(taken)
        assigned.append(taken)
    return assigned


def lower_column(word: AlignedWord) -> AlignedWord:
    return AlignedWord(word.op, word.ref.lower() if word.ref else word.ref, word.hyp.lower() if word.hyp else word.hyp)


def score_native(segments: list[StmSegment], words: list[CtmWord], glm: Glm) -> ScoreResult:
    """Score filtered hypothesis CTM words against stm segments with a GLM."""
    ref_mapper, hyp_mapper = glm.for_input("stm", "ref"), glm.for_input("ctm", "hyp")
    hyps = items_by_side(words, hyp_mapper)
    sides: dict[tuple[str, str], list[StmSegment]] = defaultdict(list)
    for segment in segments:
        sides[(segment.file, segment.channel)].append(segment)
    unknown = sorted(set(hyps) - set(sides))
    if unknown:
        shown = ", ".join(f"{f} {c}" for f, c in unknown[:5])
        raise InputError(
            f"the hypothesis CTM has {len(unknown)} conversation sides that are not in the stm ({shown}); "
            "score the set that was decoded"
        )
    utterances, per_speaker, ignored_words = [], defaultdict(int), 0
    for side in sorted(sides):
        for segment, items in zip(sides[side], assign_to_segments(sides[side], hyps.get(side, []))):
            if segment.ignored:
                ignored_words += len(items)
                continue
            ref = parse_transcript(filter_text(segment.text, ref_mapper), f"stm segment {segment.file} {segment.start}")
            hyp = Network()
            for item in items:
                hyp.extend(item.network)
            _, columns = align_networks(ref, hyp)
            speaker = segment.speaker.lower()
            utt = f"{speaker}-{per_speaker[speaker]:03d}"
            per_speaker[speaker] += 1
            utterances.append(UttAlignment(utt, speaker, tuple(lower_column(c) for c in columns)))
    if ignored_words:
        log.info(
            "%d hypothesis words fell in IGNORE_TIME_SEGMENT_IN_SCORING segments and were not scored", ignored_words
        )
    return ScoreResult.from_utterances(utterances)
