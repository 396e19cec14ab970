"""Word error rate with jiwer: Kaldi text files in, a ScoreResult out.

Both sides are normalised (asr.score.normalize), aligned with jiwer.process_words (one
Levenshtein alignment per utterance, as sclite does), and the per-utterance counts are summed
per subset (asr.score.subsets) and per speaker. A reference utterance without a hypothesis
line is scored as all deletions and logged; a hypothesis for an utterance the reference does
not have is an error, as is a hypothesis file with no lines (never a silent 100% WER).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import jiwer

from asr.kaldi.table import c_sort_key, read_table
from asr.score.normalize import normalize_words
from asr.score.result import (
    CORRECT,
    DELETION,
    INSERTION,
    SUBSTITUTION,
    AlignedWord,
    ScoreResult,
    UttAlignment,
)
from asr.utils.errors import InputError

log = logging.getLogger(__name__)

SHOW_IDS = 5  # how many offending utterance ids a message or log line names

_OP_OF_CHUNK = {"equal": CORRECT, "substitute": SUBSTITUTION, "delete": DELETION, "insert": INSERTION}


def read_transcripts(path: str | os.PathLike, what: str, made_by: str) -> dict[str, str]:
    """Read a Kaldi `text` file (`utt word word ...`; an utterance may have no words).

    `what` names the file's role in messages ("reference"), `made_by` the stage that writes it.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: {what} file not found; run {made_by} first")
    transcripts = read_table(path, allow_empty_value=True)
    if not transcripts:
        raise InputError(f"{path}: {what} file has no utterances; re-run {made_by}")
    return transcripts


def speaker_of(utt: str, utt2spk: dict[str, str] | None) -> str:
    """The speaker from utt2spk, else from Kaldi's id convention `<speaker>_<start>-<end>`."""
    if utt2spk and utt in utt2spk:
        return utt2spk[utt]
    return utt.rsplit("_", 1)[0]


def _first_ids(utts: list[str]) -> str:
    shown = ", ".join(utts[:SHOW_IDS])
    return shown + (f", ... ({len(utts) - SHOW_IDS} more)" if len(utts) > SHOW_IDS else "")


def check_hypotheses_known(refs: dict[str, str], hyps: dict[str, str], hyp_source: str, ref_source: str) -> None:
    unknown = sorted((utt for utt in hyps if utt not in refs), key=c_sort_key)
    if unknown:
        raise InputError(
            f"{hyp_source}: {len(unknown)} hypothesis utterance(s) are not in the reference {ref_source}: "
            f"{_first_ids(unknown)}; score the set that was decoded (decode.sets) or re-run decode"
        )


def log_missing_hypotheses(missing: list[str], total: int, hyp_source: str) -> None:
    if missing:
        log.warning(
            "%s: %d of %d reference utterances have no hypothesis; scored as all deletions (%s)",
            hyp_source,
            len(missing),
            total,
            _first_ids(missing),
        )


def _aligned_words(ref: list[str], hyp: list[str], chunks) -> tuple[AlignedWord, ...]:
    """Expand jiwer's alignment chunks (spans of one edit type) into one column per word."""
    words: list[AlignedWord] = []
    for chunk in chunks:
        op = _OP_OF_CHUNK[chunk.type]
        ref_span = ref[chunk.ref_start_idx : chunk.ref_end_idx]
        hyp_span = hyp[chunk.hyp_start_idx : chunk.hyp_end_idx]
        if op == DELETION:
            words += [AlignedWord(op, r, None) for r in ref_span]
        elif op == INSERTION:
            words += [AlignedWord(op, None, h) for h in hyp_span]
        else:  # equal and substitute spans pair words one to one
            words += [AlignedWord(op, r, h) for r, h in zip(ref_span, hyp_span, strict=True)]
    return tuple(words)


def align(refs: dict[str, list[str]], hyps: dict[str, list[str]]) -> dict[str, tuple[AlignedWord, ...]]:
    """Align normalised word lists utterance by utterance (one jiwer call for all)."""
    utts = list(refs)
    output = jiwer.process_words([" ".join(refs[u]) for u in utts], [" ".join(hyps[u]) for u in utts])
    return {
        utt: _aligned_words(refs[utt], hyps[utt], chunks) for utt, chunks in zip(utts, output.alignments, strict=True)
    }


def check_reference_words(result: ScoreResult, ref_source: str) -> None:
    """A subset without scored reference words has no WER; say so instead of dividing by 0."""
    for name, counts in result.subsets.items():
        if counts.words == 0:
            raise InputError(
                f"{ref_source}: subset {name!r} has no reference words left after removing noise tags, "
                "<unk>, fillers and partial words; check the reference text"
            )


def score(
    refs: dict[str, str],
    hyps: dict[str, str],
    utt2spk: dict[str, str] | None = None,
    ref_source: str = "reference",
    hyp_source: str = "hypothesis",
) -> ScoreResult:
    """Score hypothesis against reference transcripts (utterance id -> text).

    `ref_source`/`hyp_source` name the inputs in messages (file paths when read from disk).
    """
    if not refs:
        raise InputError(f"{ref_source}: no reference utterances to score against")
    if not hyps:  # scoring would report 100% deletions; a decode that wrote nothing is a failure
        raise InputError(f"{hyp_source}: no hypotheses; re-run the decode stage for this set")
    check_hypotheses_known(refs, hyps, hyp_source, ref_source)
    utts = sorted(refs, key=c_sort_key)
    missing = [utt for utt in utts if utt not in hyps]
    log_missing_hypotheses(missing, len(utts), hyp_source)
    ref_words = {utt: normalize_words(refs[utt]) for utt in utts}
    hyp_words = {utt: normalize_words(hyps.get(utt, "")) for utt in utts}
    alignments = align(ref_words, hyp_words)
    result = ScoreResult.from_utterances(
        UttAlignment(utt, speaker_of(utt, utt2spk), alignments[utt], hyp_missing=utt not in hyps) for utt in utts
    )
    check_reference_words(result, ref_source)
    return result


def score_files(
    ref_path: str | os.PathLike, hyp_path: str | os.PathLike, utt2spk_path: str | os.PathLike | None = None
) -> ScoreResult:
    """Score a hypothesis text file against a reference text file (Kaldi format both)."""
    refs = read_transcripts(ref_path, "reference", made_by="the data preparation stage")
    hyps = read_transcripts(hyp_path, "hypothesis", made_by="the decode stage for this set")
    utt2spk = read_table(utt2spk_path) if utt2spk_path and Path(utt2spk_path).is_file() else None
    return score(refs, hyps, utt2spk, ref_source=str(ref_path), hyp_source=str(hyp_path))
