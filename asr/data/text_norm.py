"""Transcript normalisation: MS98 Switchboard transcripts, Fisher transcripts and Hub5 stm
references.

MS98 rules follow Kaldi's egs/swbd/s5c local/swbd1_data_prep.sh (drop `[silence]` and the
`<b_aside>`/`<e_aside>` markers) and local/swbd1_map_words.pl (one word at a time, the rules
in the order the script applies them, because later rules see the output of earlier ones).

The stm rules turn a Hub5 reference line into the `text` of the eval data dir. Kaldi's
eval2000_data_prep.sh copies the stm words unchanged (upper case, with `(%HESITATION)` and
parentheses); we apply what ESPnet's swbd recipe applies on top of it, so `text` uses the
same lower-case vocabulary as the training transcripts: lower case, `(%HESITATION)`-style
placeholders and `<...>` tags removed, the parentheses around optionally deletable words
removed (the word is kept). Scoring uses the stm itself, not this text.

Fisher rules follow Kaldi's egs/fisher_swbd/s5 local/fisher_data_prep.sh, which makes the
training text of SWB-2000: a line with an uncertain `((...))` transcription is dropped whole,
and the Fisher event tags become the three Switchboard ones. We also lower-case (Fisher is
lower case except a few words such as `I'm`), so that the Fisher and Switchboard halves of
the combined training text share one vocabulary; Kaldi leaves that to its lexicon lookup.
"""

from __future__ import annotations

import re
from typing import Callable

# Tags kept in training text: the lexicon gives them their own phones (Kaldi's NSN/LAU/SPN).
NOISE_TAGS = frozenset({"[noise]", "[laughter]", "[vocalized-noise]"})
SILENCE_TAG = "[silence]"
ASIDE_MARKERS = frozenset({"<b_aside>", "<e_aside>"})
# The stm text of a region that is not scored; Kaldi leaves such segments out of `text`.
IGNORED_SEGMENT = "ignore_time_segment_in_scoring"


# --- MS98 word rules (swbd1_map_words.pl), each applied to one lower-cased word ---

_LAUGHTER_WORD = re.compile(r"^(-?)\[laughter-(.+)\](-?)$")
_MISPRONOUNCED = re.compile(r"^\[(.+)/.+\](-?)$")
_MISSING_START = re.compile(r"^-?\[[^][]+\](.+)$")
_MISSING_END = re.compile(r"^(.+)\[[^][]+\]-?$")
_STRAY_BRACKET = re.compile(r"([^][]+)\[.+\]$")
_COINAGE = re.compile(r"^\{(.+)\}$")
_MISSING_MIDDLE = re.compile(r"([a-z])\[[^][]+\]([a-z])")
_VARIANT_NUMBER = re.compile(r"_\d")


def laughter_word(word: str) -> str:
    """A word said laughing is the word: `[laughter-yes]` -> `yes` (trailing `-` kept)."""
    return _LAUGHTER_WORD.sub(r"\1\2\3", word)


def mispronounced_word(word: str) -> str:
    """`[it'n/isn't]` (said/meant) -> `it'n`: the transcript keeps what was said."""
    return _MISPRONOUNCED.sub(r"\1\2", word)


def partial_word_missing_start(word: str) -> str:
    """`[ab]solute` or `-[ab]solute` (the start not said) -> `-solute`."""
    return _MISSING_START.sub(r"-\1", word)


def partial_word_missing_end(word: str) -> str:
    """`ab[solute]-` (the end not said; the `-` is sometimes omitted) -> `ab-`."""
    return _MISSING_END.sub(r"\1-", word)


def stray_bracket(word: str) -> str:
    """Typos such as `ex[specially]-/especially]` -> `ex`: keep the text before the bracket."""
    return _STRAY_BRACKET.sub(r"\1", word)


def coinage(word: str) -> str:
    """`{yuppiedom}` (a made-up word) -> `yuppiedom`."""
    return _COINAGE.sub(r"\1", word)


def partial_word_missing_middle(word: str) -> str:
    """`ammu[n]it-` -> `ammu-it-`.

    This is what the Kaldi comment says; its Perl refers to an unset `$3` and would give
    `ammn-t-`, which we do not copy.
    """
    return _MISSING_MIDDLE.sub(r"\1-\2", word)


def variant_number(word: str) -> str:
    """`them_1` -> `them`, `them_1's` -> `them's` (first `_N` only, as Kaldi)."""
    return _VARIANT_NUMBER.sub("", word, count=1)


MS98_WORD_RULES: tuple[Callable[[str], str], ...] = (
    laughter_word,
    mispronounced_word,
    partial_word_missing_start,
    partial_word_missing_end,
    stray_bracket,
    coinage,
    partial_word_missing_middle,
    variant_number,
)


def normalize_ms98_word(word: str) -> str:
    word = word.lower()
    for rule in MS98_WORD_RULES:
        word = rule(word)
    return word


def drop_silence_and_asides(words: list[str]) -> list[str]:
    """`[silence]` is not transcribed speech; aside markers only bracket speech to someone else."""
    return [w for w in words if w.lower() != SILENCE_TAG and w.lower() not in ASIDE_MARKERS]


def normalize_ms98_text(text: str) -> str:
    """One MS98 transcript (the words after the times) -> the data dir's `text` value.

    Returns "" when nothing is left (a `[silence]`-only segment); the caller drops it.
    """
    words = drop_silence_and_asides(text.split())
    return " ".join(normalize_ms98_word(w) for w in words)


# --- Hub5 stm reference rules (eval2000 `text`) ---

_ANGLE_TAG = re.compile(r"^<[^ ]*>$")


def drop_hesitation_placeholders(words: list[str]) -> list[str]:
    """`(%HESITATION)`, `(%UH)`: the GLM's filler class, not a word a model can output."""
    return [w for w in words if not w.strip("()").startswith("%")]


def drop_angle_tags(words: list[str]) -> list[str]:
    """`<B_ASIDE>`, `<E_ASIDE>` and other `<...>` markers in the stm text."""
    return [w for w in words if not _ANGLE_TAG.match(w)]


def unwrap_optional_words(words: list[str]) -> list[str]:
    """`(UH-)`, `((I))` -> `uh-`, `i`: parentheses only mark a word optionally deletable in scoring."""
    unwrapped = (w.replace("(", "").replace(")", "") for w in words)
    return [w for w in unwrapped if w]


def is_ignored_segment(stm_text: str) -> bool:
    """An stm region marked not to be scored (no reference words)."""
    return stm_text.strip().lower() == IGNORED_SEGMENT


def normalize_stm_text(text: str) -> str:
    """The words of one stm line -> the eval data dir's `text` value ("" if nothing is left)."""
    words = text.lower().split()
    words = drop_hesitation_placeholders(words)
    words = drop_angle_tags(words)
    return " ".join(unwrap_optional_words(words))


# --- Fisher rules (fisher_data_prep.sh), applied to the words of one transcript line ---

UNCERTAIN_MARK = "(("
# fisher_data_prep.sh's sed lines, in its order: laughter keeps its own phone, the rest is noise.
FISHER_TAGS = {
    "[laugh]": "[laughter]",
    "[sigh]": "[noise]",
    "[cough]": "[noise]",
    "[mn]": "[noise]",
    "[breath]": "[noise]",
    "[lipsmack]": "[noise]",
}


def is_uncertain_fisher_line(text: str) -> bool:
    """`(( what was that ))`: the transcriber was unsure; Kaldi drops the whole line."""
    return UNCERTAIN_MARK in text


def map_fisher_tags(words: list[str]) -> list[str]:
    """`[laugh]` -> `[laughter]`; `[sigh]`, `[cough]`, `[mn]`, `[breath]`, `[lipsmack]` -> `[noise]`."""
    return [FISHER_TAGS.get(w, w) for w in words]


def normalize_fisher_text(text: str) -> str:
    """The words of one Fisher line (after `A:`) -> the data dir's `text` ("" = drop the line)."""
    if is_uncertain_fisher_line(text):
        return ""
    return " ".join(map_fisher_tags(text.lower().split()))
