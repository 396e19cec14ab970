"""From hypotheses to files: words with times, Kaldi `hyp.txt` and NIST CTM `hyp.ctm`
(asr/data/ctm.py writes it).

A word spans from the emission frame of its first token to the emission frame of its last
token plus one frame (the usual CTC convention: CTC places spikes, not boundaries). Times
are absolute: segment start + output frame x frame shift x subsampling. The confidence of
a word is the mean posterior of its tokens at their emission frames.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from asr.data.ctm import CtmWord
from asr.data.datadir import DataDir
from asr.decode.hypothesis import Hypothesis
from asr.kaldi.table import write_table
from asr.text.tokenizer import Tokenizer
from asr.utils.atomic import atomic_path, write_text

log = logging.getLogger(__name__)

DEFAULT_CHANNEL = "A"


def evaluation_sets(cfg) -> list[str]:
    """The sets to decode and score: decode.sets, or the evaluation set when that list is empty."""
    return list(cfg.decode.sets) or [cfg.data.eval_set]


def decode_dir(cfg, set_name: str) -> Path:
    """Where a set's hypotheses and scores go: <exp_dir>/decode_<set><decode.dir_suffix>."""
    return Path(cfg.exp_dir) / f"decode_{set_name}{cfg.decode.get('dir_suffix', '')}"


@dataclass(frozen=True)
class TimedWord:
    word: str
    start_frame: int
    end_frame: int  # exclusive
    confidence: float


def timed_words(hyp: Hypothesis, tokenizer: Tokenizer) -> list[TimedWord]:
    return [
        TimedWord(word, hyp.frames[first], hyp.frames[last] + 1, sum(hyp.probs[first : last + 1]) / (last - first + 1))
        for word, first, last in tokenizer.word_spans(hyp.tokens)
    ]


def file_and_channel(data: DataDir, utt: str) -> tuple[str, str]:
    """From reco2file_and_channel; without it the recording id and channel A."""
    recording = data.recording_of(utt)
    return data.reco2file_and_channel.get(recording, (recording, DEFAULT_CHANNEL))


def ctm_words(data: DataDir, utt: str, words: list[TimedWord], frame_seconds: float) -> list[CtmWord]:
    file, channel = file_and_channel(data, utt)
    offset = data.segments[utt].start if utt in data.segments else 0.0
    return [
        CtmWord(
            file,
            channel,
            offset + w.start_frame * frame_seconds,
            (w.end_frame - w.start_frame) * frame_seconds,
            w.word,
            w.confidence,
        )
        for w in words
    ]


def write_hyp_text(path: str | os.PathLike, hyps: dict[str, str]) -> None:
    """Kaldi text: `utt word word ...`, sorted by utterance (C locale)."""
    with atomic_path(path) as tmp:
        write_table(tmp, hyps)


def report_skipped(out_dir: Path, set_name: str, skipped: dict[str, str]) -> None:
    """Log and list (decode_<set>/skipped) the utterances left undecoded; none: no file."""
    path = out_dir / "skipped"
    if not skipped:
        path.unlink(missing_ok=True)
        return
    write_text(path, "".join(f"{utt} {reason}\n" for utt, reason in sorted(skipped.items())))
    log.warning(
        "%s: %d utterances not decoded (NaN/inf features; scored as deletions), listed in %s: %s",
        set_name,
        len(skipped),
        path,
        " ".join(sorted(skipped)[:10]),
    )
