"""Pairing conversation sides that have a transcript with sides that have audio.

A two-channel conversation gives two sides (`sw02001-A`, `sw02001-B`), each one recording and
one speaker. A release can lack either half for a side: a transcript whose audio file is not
there (a partial copy of the audio), or audio whose side has no transcript (a transcript file
missing). Kaldi's preparers keep what pairs up and say nothing; we always count and name what
is left out, and for audio without a transcript the caller chooses: `skip` it, or `error`,
refusing the corpus with the sides and the transcript files expected for them.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from asr.kaldi.table import c_sort_key
from asr.utils.errors import InputError

if TYPE_CHECKING:
    from asr.data.datadir import Utterance
    from asr.data.fix import AudioFit

log = logging.getLogger(__name__)

MISSING_TRANSCRIPT_POLICIES = ("skip", "error")
MAX_NAMES = 10  # names listed in one message


def names(items: Iterable[str], limit: int = MAX_NAMES) -> str:
    items = sorted(items, key=c_sort_key)
    more = f" (and {len(items) - limit} more)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def sides_of(conversations: Iterable[str]) -> set[str]:
    return {f"{conv}-{channel}" for conv in conversations for channel in "AB"}


def pair_sides(
    transcribed: Iterable[str],
    with_audio: Iterable[str],
    policy: str,
    expected_transcript: Callable[[str], str],
    corpus: str,
) -> set[str]:
    """The sides that have both a transcript and audio.

    `with_audio` names conversations (each gives sides A and B); `expected_transcript(side)`
    says where that side's transcript should be, for the error message.
    """
    if policy not in MISSING_TRANSCRIPT_POLICIES:
        raise InputError(f"data.missing_transcript={policy!r}: choose one of {list(MISSING_TRANSCRIPT_POLICIES)}")
    transcribed = set(transcribed)
    audio_sides = sides_of(with_audio)
    no_audio = transcribed - audio_sides
    if no_audio:
        log.warning("%s: skipped %d transcript sides with no audio file: %s", corpus, len(no_audio), names(no_audio))
    no_transcript = audio_sides - transcribed
    if no_transcript and policy == "error":
        shown = "\n  ".join(
            f"{side}: expected {expected_transcript(side)}"
            for side in sorted(no_transcript, key=c_sort_key)[:MAX_NAMES]
        )
        more = f"\n  (and {len(no_transcript) - MAX_NAMES} more)" if len(no_transcript) > MAX_NAMES else ""
        raise InputError(
            f"{corpus}: {len(no_transcript)} conversation sides have audio but no transcript:\n  {shown}{more}\n"
            "restore the transcripts, or pass data.missing_transcript=skip to prepare without these sides"
        )
    if no_transcript:
        log.warning(
            "%s: skipped %d audio sides with no transcript: %s", corpus, len(no_transcript), names(no_transcript)
        )
    return transcribed & audio_sides


def fitted_sides(
    corpus: str, sides: Iterable[tuple[str, list[Utterance]]], dropped: Counter, fit: AudioFit
) -> Iterator[Utterance]:
    """Each side's utterances fitted to its audio (`fit`), in order; once all are seen, logs the
    transcript lines `dropped` (by reason, as the sides' reader counted them), the sides left
    with no speech, what `fit.finish` reports and how many utterances came from how many sides."""
    silent, kept = [], Counter()
    for side, utterances in sides:
        if not utterances:
            silent.append(side)
        for utterance in fit.fitted(utterances):
            kept[side] += 1
            yield utterance
    for reason, count in sorted(dropped.items()):
        log.info("%s: dropped %d transcript lines: %s", corpus, count, reason)
    if silent:
        left = names(silent)
        log.warning("%s: skipped %d sides with no speech left after normalisation: %s", corpus, len(silent), left)
    fit.finish()
    log.info("%s: %d utterances from %d conversation sides", corpus, sum(kept.values()), len(kept))
