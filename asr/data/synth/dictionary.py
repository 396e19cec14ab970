"""The synthetic corpus' pronunciation dictionary, in the MS98 dictionary's format and place:

    swb_ms98_transcriptions/sw-ms98-dict.text

`#` comment lines, then one `word  ph1 ph2 ...` line per pronunciation, words sorted (C
locale). The pronunciations are eSpeak NG's own phonemisation of each word of the grammar's
vocabulary for every accent the corpus' speakers use, with the stress marks and pauses
removed exactly as in the phone timings (`asr.data.synth.phones.phone_name`), so a word's
phones are those its `-ms98-a-phone.text` lines carry when eSpeak says it on its own. A word
that accents say differently gets several lines. The voice variants (`+m3`, `+Annie`) change
only the voice, not the phonemes, so one phonemisation per accent covers every voice.

Words in running speech can come out otherwise (`to` as `t @`, `time` with `t2`), so each
training transcript is phonemised too, as its speaker's accent says it, and every word's
in-context phones are added as further pronunciations (a segment whose phoneme words do not
line up one to one with its spoken words is left out).

`them_1` (MS98's reduced `them`, spoken "em") is written with the phones of "em". Partial
words (`ab[solute]-`) are not in it: how much of the word is kept depends on the audio, not on
the text. Silence and noise words (`[noise]` and the like) are not either: the lexicon reader
adds them with Kaldi's silence phones, as Kaldi's swbd1_prepare_dict.sh does for the real
dictionary.
"""

from __future__ import annotations

from pathlib import Path

from asr.data.synth import grammar as gr
from asr.data.synth import tokens as tk
from asr.data.synth.espeak import Espeak
from asr.data.synth.layouts import MS98_DIR
from asr.data.synth.phones import phone_name
from asr.utils.atomic import write_text
from asr.utils.errors import InputError

DICTIONARY_NAME = "sw-ms98-dict.text"
HEADER = (
    "#\n"
    "# Synthetic Switchboard pronunciation dictionary (MS98 format): eSpeak NG's phonemisation\n"
    "# of every vocabulary word for each accent of the corpus, stress marks removed.\n"
    "#\n"
)


def dictionary_path(root: Path) -> Path:
    return Path(root) / MS98_DIR / DICTIONARY_NAME


def spoken_forms() -> dict[str, str]:
    """Dictionary word -> the text eSpeak speaks for it."""
    forms = {w: w for w in gr.vocabulary()}
    reduced = tk.variant("them")
    forms[reduced.ms98] = reduced.spoken
    return forms


def phonemise(engine: Espeak, text: str, accent: str) -> tuple[str, ...]:
    phones = tuple(p for p in (phone_name(m) for m in engine.phonemes(text, accent)) if p is not None)
    if not phones:
        raise InputError(f"eSpeak NG ({accent}) gives no phones for {text!r}; remove it from the synth grammar")
    return phones


def spoken_token(ms98: str) -> tuple[str | None, str]:
    """An MS98 transcript word -> (its dictionary word or None, what eSpeak said for it)."""
    if ms98 in (tk.NOISE, tk.LAUGHTER, tk.SILENCE):
        return None, ""
    if ms98 == tk.VOCALIZED_NOISE:
        return None, tk.vocalized_noise().spoken
    if ms98.startswith("[laughter-"):
        return ms98[len("[laughter-") : -1], ms98[len("[laughter-") : -1]
    if "[" in ms98:  # a partial word: spoken whole, then cut
        return None, ms98.replace("[", "").replace("]", "").rstrip("-")
    if ms98.startswith("{"):
        return ms98.strip("{}"), ms98.strip("{}")
    return ms98, spoken_forms().get(ms98, ms98)


def context_prons(engine: Espeak, words: list[str], accent: str) -> list[tuple[str, tuple[str, ...]]]:
    """(dictionary word, phones) for each word of one transcript segment, phonemised together."""
    tokens = [t for t in (spoken_token(w) for w in words) if t[1]]
    if not tokens:
        return []
    groups = engine.phonemes_by_word(" ".join(spoken for _, spoken in tokens), accent)
    if len(groups) != len(tokens):
        return []
    out = []
    for (word, _), group in zip(tokens, groups):
        phones = tuple(p for p in (phone_name(m) for m in group) if p is not None)
        if word is not None and phones:
            out.append((word, phones))
    return out


Pronunciations = dict[str, dict[tuple[str, ...], None]]  # word -> its phone sequences, in order
ContextProns = list[tuple[str, tuple[str, ...]]]  # (word, phones) as spoken in a segment, in order


def word_pronunciations(accents: list[str], engine: Espeak | None = None) -> Pronunciations:
    """Each vocabulary word as every accent says it on its own."""
    engine = engine or Espeak.instance()
    return {
        word: dict.fromkeys(phonemise(engine, spoken, accent) for accent in accents)
        for word, spoken in spoken_forms().items()
    }


def transcript_pronunciations(transcripts: list[tuple[list[str], str]], engine: Espeak | None = None) -> ContextProns:
    """Every word of these segments as its speaker's accent says it in context, in segment order:
    a part of the transcripts can be phonemised in a process of its own."""
    engine = engine or Espeak.instance()
    return [pron for words, accent in transcripts for pron in context_prons(engine, words, accent)]


def merged_lines(prons: Pronunciations, parts: list[ContextProns]) -> list[str]:
    """`word  phones` lines, sorted by word: the words' own pronunciations, then those the
    transcripts add, part after part."""
    for part in parts:
        for word, phones in part:
            if word in prons:
                prons[word][phones] = None
    return [f"{word}  {' '.join(pron)}" for word in sorted(prons, key=str.encode) for pron in prons[word]]


def write_dictionary_lines(root: Path, lines: list[str]) -> Path:
    path = dictionary_path(root)
    write_text(path, HEADER + "\n".join(lines) + "\n")
    return path


def training_transcripts(root: Path, side_accents: dict[str, str]):
    """(words, accent) for each speech segment of the MS98 transcripts whose side has an accent."""
    for path in sorted((Path(root) / MS98_DIR).glob("*/*/*-ms98-a-trans.text")):
        accent = side_accents.get(path.name.split("-", 1)[0])
        if accent is None:
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            words = line.split()[3:]
            if words and words != [tk.SILENCE]:
                yield words, accent
