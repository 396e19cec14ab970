"""The standard Hub5 filtering of a hypothesis CTM (asr/data/ctm.py) before scoring.

Before scoring, the way
Kaldi's and ESPnet's local/score_sclite.sh do it, the hypothesis drops noise tags
(`[noise]`, `[laughter]`, `[vocalized-noise]`), `<unk>`, the hesitations the GLM would map
to %HESITATION (uh, um, ...: asr.score.normalize.FILLERS) and partial words ending in `-`;
the reference marks all of these optionally deletable, so producing them could only add
errors.
"""

from __future__ import annotations

from asr.data.ctm import CtmWord
from asr.score.normalize import is_filler, is_noise_tag, is_non_lexical_marker


def is_scored_hyp_word(word: str) -> bool:
    """Whether a hypothesis word survives the standard filter (case-insensitive)."""
    w = word.lower()
    return not (is_noise_tag(w) or is_non_lexical_marker(w) or is_filler(w) or w.endswith("-"))


def filter_ctm(words: list[CtmWord]) -> list[CtmWord]:
    return [w for w in words if is_scored_hyp_word(w.word)]
