"""Transcript tokens: one spoken or non-speech event, with the way each corpus writes it.

The generator decides *what happens* (a word, a filler, a cut-off word, a laugh) once, as a
`Token`, and each output format renders it in its own convention:

* `ms98`  - Switchboard MS98 transcripts: lower case, `[noise]`, `[laughter-yes]`,
            `ab[solute]-`, `{workaholic}`, `them_1`;
* `stm`   - the Hub5-2000 reference: upper case, `(%HESITATION)`, `(AB-)`,
            `<B_ASIDE>`; noise and laughter are not written;
* `spoken`- the text eSpeak reads ('' for sounds that are not synthesised speech);
* `cut`   - the fraction of the spoken word that is kept in the audio (partial words).
"""

from __future__ import annotations

from dataclasses import dataclass

NOISE = "[noise]"
LAUGHTER = "[laughter]"
VOCALIZED_NOISE = "[vocalized-noise]"
SILENCE = "[silence]"
HESITATION = "(%HESITATION)"

# Kinds. WORD-like kinds are lexical: they count as words and belong to the vocabulary.
WORD = "word"
FILLER = "filler"
PARTIAL = "partial"
LAUGHTER_WORD = "laughter_word"
BRACED = "braced"
VARIANT = "variant"
EVENT = "event"  # noise, laughter: inserted sounds, not eSpeak speech
VOCAL = "vocal"  # vocalized noise: a short "hmm" spoken by the speaker's voice
MARK = "mark"  # stm-only markup such as <B_ASIDE>

LEXICAL_KINDS = (WORD, FILLER, LAUGHTER_WORD, BRACED, VARIANT)


@dataclass(frozen=True)
class Token:
    kind: str
    word: str  # the lexical word meant ('' for events and marks)
    ms98: str
    stm: str
    spoken: str
    cut: float = 1.0

    @property
    def is_lexical(self) -> bool:
        return self.kind in LEXICAL_KINDS

    @property
    def is_event(self) -> bool:
        return self.kind in (EVENT, VOCAL)


def word(text: str) -> Token:
    return Token(WORD, text, text, text.upper(), text)


def filler(text: str) -> Token:
    """uh, um: the Hub5 reference writes every hesitation as optionally deletable."""
    return Token(FILLER, text, text, HESITATION, text)


def partial(text: str, prefix_len: int) -> Token:
    """A word cut off after `prefix_len` letters: MS98 `ab[solute]-`, stm `(AB-)`."""
    prefix, rest = text[:prefix_len], text[prefix_len:]
    return Token(PARTIAL, "", f"{prefix}[{rest}]-", f"({prefix.upper()}-)", text, cut=prefix_len / len(text))


def laughter_word(text: str) -> Token:
    return Token(LAUGHTER_WORD, text, f"[laughter-{text}]", text.upper(), text)


def braced(text: str) -> Token:
    """MS98 writes coinages and non-standard words in braces: {workaholic}."""
    return Token(BRACED, text, "{" + text + "}", text.upper(), text)


def variant(text: str) -> Token:
    """MS98 marks a reduced pronunciation with _1 (them_1, said like 'em)."""
    return Token(VARIANT, text, f"{text}_1", text.upper(), "em" if text == "them" else text)


def noise() -> Token:
    return Token(EVENT, "", NOISE, "", "")


def laughter() -> Token:
    return Token(EVENT, "", LAUGHTER, "", "")


def vocalized_noise() -> Token:
    return Token(VOCAL, "", VOCALIZED_NOISE, "", "hmm")


def mark(stm: str) -> Token:
    return Token(MARK, "", "", stm, "")
