"""What every scorer returns: error counts per subset and per speaker, and the alignments.

The jiwer scorer (`asr.score.wer`) fills it today; the Hub5 scorers (NIST SCTK and its
native equivalent) return the same type, so the report writers serve them all.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable

from asr.score.subsets import reported_subsets, subsets_of

# Edit operations, as sclite's pra file spells them.
CORRECT, SUBSTITUTION, DELETION, INSERTION = "C", "S", "D", "I"


@dataclass(frozen=True)
class ErrorCounts:
    """Word error counts over some utterances ("sentences" in sclite's words)."""

    correct: int = 0
    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0
    sentences: int = 0

    @property
    def words(self) -> int:
        """Reference words: every one is either correct, substituted or deleted."""
        return self.correct + self.substitutions + self.deletions

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def wer(self) -> float:
        """Word error rate in percent, rounded to 2 decimals."""
        if self.words == 0:
            raise ValueError("word error rate is undefined without reference words")
        return round(100.0 * self.errors / self.words, 2)

    def __add__(self, other: "ErrorCounts") -> "ErrorCounts":
        return ErrorCounts(
            self.correct + other.correct,
            self.substitutions + other.substitutions,
            self.deletions + other.deletions,
            self.insertions + other.insertions,
            self.sentences + other.sentences,
        )

    def as_report(self) -> dict:
        """The per-subset object of wer.json; every scorer keeps exactly these keys."""
        return {
            "wer": self.wer,
            "sub": self.substitutions,
            "del": self.deletions,
            "ins": self.insertions,
            "words": self.words,
            "sentences": self.sentences,
        }


@dataclass(frozen=True)
class AlignedWord:
    """One column of an alignment; the missing side of an insertion or deletion is None."""

    op: str
    ref: str | None
    hyp: str | None


@dataclass(frozen=True)
class UttAlignment:
    """One utterance's alignment of (normalised) reference and hypothesis words."""

    utt: str
    speaker: str
    words: tuple[AlignedWord, ...]
    hyp_missing: bool = False  # no hypothesis line at all, scored as all deletions

    @property
    def counts(self) -> ErrorCounts:
        ops = [w.op for w in self.words]
        return ErrorCounts(
            correct=ops.count(CORRECT),
            substitutions=ops.count(SUBSTITUTION),
            deletions=ops.count(DELETION),
            insertions=ops.count(INSERTION),
            sentences=1,
        )


@dataclass
class ScoreResult:
    """Counts per reported subset (report order: swb, callhome, total) and per speaker."""

    subsets: dict[str, ErrorCounts]
    speakers: dict[str, ErrorCounts] = field(default_factory=dict)
    utterances: list[UttAlignment] = field(default_factory=list)
    missing_hypotheses: list[str] = field(default_factory=list)

    @classmethod
    def from_utterances(cls, utterances: Iterable[UttAlignment]) -> "ScoreResult":
        """Sum per-utterance counts into subsets and speakers."""
        utterances = list(utterances)
        by_subset: dict[str, ErrorCounts] = defaultdict(ErrorCounts)
        by_speaker: dict[str, ErrorCounts] = defaultdict(ErrorCounts)
        for utt in utterances:
            counts = utt.counts
            for subset in subsets_of(utt.utt):
                by_subset[subset] += counts
            by_speaker[utt.speaker] += counts
        return cls(
            subsets={name: by_subset[name] for name in reported_subsets(u.utt for u in utterances)},
            speakers={spk: by_speaker[spk] for spk in sorted(by_speaker)},
            utterances=utterances,
            missing_hypotheses=[u.utt for u in utterances if u.hyp_missing],
        )
