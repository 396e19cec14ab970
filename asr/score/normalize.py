"""The scoring normalisation applied to both reference and hypothesis before alignment.

This is the simplified form of the Switchboard convention of Kaldi and ESPnet
(local/score_sclite.sh): words that the Hub5 reference marks optionally deletable are removed from both
sides, so that producing them neither costs nor gains anything. The NIST GLM (contractions,
spelling variants, alternates) is not applied here; that is the Hub5 scorer's job.
"""

from __future__ import annotations

# The hesitations the Hub5 GLM maps to %HESITATION, as filtered from the hypothesis CTM by
# Kaldi egs/swbd/s5c/local/score_sclite.sh and ESPnet egs/swbd/asr1/local/score_sclite.sh:
#   grep -i -v -E ' (UH|UM|EH|MM|HM|AH|HUH|HA|ER|OOF|HEE|ACH|EEE|EW)$'
# plus %hesitation itself, in case a reference was made from GLM-mapped text.
# "oh" is not among them: the GLM scores it as an ordinary word, and so do we.
FILLERS = frozenset(
    {"uh", "um", "eh", "mm", "hm", "ah", "huh", "ha", "er", "oof", "hee", "ach", "eee", "ew", "%hesitation"}
)


def is_noise_tag(word: str) -> bool:
    """Bracketed event tags: [noise], [laughter], [vocalized-noise], [silence], ..."""
    return word.startswith("[") and word.endswith("]")


def is_non_lexical_marker(word: str) -> bool:
    """Angle-bracket lexicon symbols: <unk>, and the like of <sil>, <noise>, <spoken_noise>."""
    return word.startswith("<") and word.endswith(">")


def is_filler(word: str) -> bool:
    return word in FILLERS


def is_partial_word(word: str) -> bool:
    """Word fragments: `ab-` (MS98 `ab[solute]-`) and `-solute` (`[ab]solute`).

    The Hub5 reference marks both kinds optionally deletable, so both are dropped; Kaldi's
    filter only catches the trailing hyphen.
    """
    return word.startswith("-") or word.endswith("-")


def is_scored(word: str) -> bool:
    """Whether a lower-cased word takes part in the alignment."""
    return not (is_noise_tag(word) or is_non_lexical_marker(word) or is_filler(word) or is_partial_word(word))


def normalize_words(text: str) -> list[str]:
    """Lower-case `text`, split it on white space and keep the scored words."""
    return [word for word in text.lower().split() if is_scored(word)]
