"""The synthetic corpus' pronunciation dictionary, in the MS98 dictionary's format and place:

    swb_ms98_transcriptions/sw-ms98-dict.text

`#` comment lines, then one `word  ph1 ph2 ...` line per pronunciation, words sorted (C
locale). The pronunciations are eSpeak NG's own phonemisation of each word of the grammar's
vocabulary for every accent the corpus' speakers use, with the stress marks and pauses
removed exactly as in the phone timings (`asr.data.synth.phones.phone_name`), so a word's
phones are those its `-ms98-a-phone.text` lines carry when eSpeak says it on its own. A word
that accents say differently gets several lines. The voice variants (`+m3`, `+Annie`) change
only the voice, not the phonemes, so one phonemisation per accent covers every voice.

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


def dictionary_lines(accents: list[str], engine: Espeak | None = None) -> list[str]:
    """`word  phones` lines, sorted by word, each word's distinct pronunciations in accent order."""
    engine = engine or Espeak.instance()
    lines = []
    for word, spoken in sorted(spoken_forms().items(), key=lambda item: item[0].encode()):
        prons = dict.fromkeys(phonemise(engine, spoken, accent) for accent in accents)
        lines += [f"{word}  {' '.join(pron)}" for pron in prons]
    return lines


def write_dictionary(root: Path, accents: list[str]) -> Path:
    """Write the corpus' dictionary (atomically) for these accents; returns its path."""
    path = dictionary_path(root)
    write_text(path, HEADER + "\n".join(dictionary_lines(sorted(set(accents)))) + "\n")
    return path
