"""The pronunciation lexicon, read from an MS98 dictionary (`sw-ms98-dict.text`) as Kaldi's
egs/swbd/s5c local/swbd1_prepare_dict.sh reads it.

The file: `#` comment lines, then `word  ph1 ph2 ...` a line, one line per pronunciation.
Words are lower-cased (phones are not: eSpeak's `D` and `d` differ) and mapped by the MS98
word rules (swbd1_map_words.pl: `them_1` -> `them`, `[laughter-yes]` -> `yes`, `-[ab]out` ->
`-out`, ...) so that they are the words of the training text (asr.data.text_norm); repeated
(word, pronunciation) pairs are kept once, as Kaldi's `sort -u`. Kaldi's silence and noise
words are added with their own phones, whatever the file says for them; Kaldi's silence
phones are sil, spn, nsn and lau, sil being the optional silence between words.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from asr.data.text_norm import normalize_ms98_word
from asr.utils.errors import InputError
from asr.utils.textfile import iter_lines

SILENCE_PHONES = ("sil", "spn", "nsn", "lau")  # phones.txt order: sil first
OPTIONAL_SILENCE = "sil"
OOV_WORD = "<unk>"
SILENCE_WORDS = {
    "[silence]": "sil",
    "[noise]": "nsn",
    "[laughter]": "lau",
    "[vocalized-noise]": "spn",
    OOV_WORD: "spn",
}
# Symbols of the lang dir's tables that no word or phone of a dictionary may be.
RESERVED = frozenset({"<eps>", "<s>", "</s>"})
DISAMBIG_PREFIX = "#"


@dataclass(frozen=True)
class Lexicon:
    """(word, phones) entries sorted by word (C locale), pronunciations in file order."""

    entries: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def words(self) -> list[str]:
        return sorted({word for word, _ in self.entries}, key=str.encode)

    @property
    def nonsilence_phones(self) -> list[str]:
        phones = {p for _, pron in self.entries for p in pron}
        return sorted(phones - set(SILENCE_PHONES), key=str.encode)


def _entry(path: Path, lineno: int, line: str) -> tuple[str, tuple[str, ...]]:
    fields = line.split()
    if len(fields) < 2:
        raise InputError(f"{path}:{lineno}: expected 'word phone ...', got {line.strip()!r}")
    word, phones = normalize_ms98_word(fields[0]), tuple(fields[1:])
    bad = [s for s in (word, *phones) if s in RESERVED or s.startswith(DISAMBIG_PREFIX)]
    if bad:
        raise InputError(
            f"{path}:{lineno}: {bad[0]!r} is a symbol the lang dir reserves (<eps>, <s>, </s>, #N); "
            "rename it in the dictionary"
        )
    return word, phones


def read_ms98_dictionary(path: str | Path) -> Lexicon:
    """The lexicon of an MS98-format dictionary; InputError with file:line for a bad line."""
    path = Path(path)
    if not path.is_file():
        raise InputError(
            f"{path}: pronunciation dictionary not found; the synthetic corpus writes it "
            "(re-run python -m asr.data.synth), the Switchboard release has it in swb_ms98_transcriptions/"
        )
    entries = dict.fromkeys((word, (phone,)) for word, phone in SILENCE_WORDS.items())
    for lineno, line in iter_lines(path):
        if not line.strip() or line.startswith("#"):
            continue
        word, phones = _entry(path, lineno, line)
        if word not in SILENCE_WORDS:
            entries[(word, phones)] = None
    if len(entries) == len(SILENCE_WORDS):
        raise InputError(f"{path}: no pronunciations in the dictionary")
    order = {word: i for i, word in enumerate(sorted({w for w, _ in entries}, key=str.encode))}
    return Lexicon(tuple(sorted(entries, key=lambda entry: order[entry[0]])))
