"""The decoding lexicon: each word of the LM vocabulary spelled in the tokenizer's units.

A word's spelling is exactly what the tokenizer makes of it (`▁hel lo` for BPE, `▁ h e l l o`
for a character model), so the beam search can only produce token sequences that greedy
search would decode into the same words. Words the tokenizer cannot spell faithfully (an
unknown piece, or a decoding that differs from the word) are left out and counted.
`lexicon.txt` (`word piece piece ...`) is written beside the hypotheses for inspection.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from asr.text.tokenizer import BLANK_ID, UNK_ID, Tokenizer
from asr.utils.atomic import atomic_open
from asr.utils.errors import InputError

log = logging.getLogger(__name__)

UNK_WORD = "<unk>"


@dataclass(frozen=True)
class Lexicon:
    words: tuple[str, ...]  # decoder word index -> word; index 0 is <unk>
    spellings: tuple[tuple[int, ...], ...]  # token ids of each word (empty for <unk>)
    skipped: tuple[str, ...] = ()

    def write(self, path: str | os.PathLike, tokenizer: Tokenizer) -> None:
        with atomic_open(path, encoding="utf-8") as f:
            for word, spelling in zip(self.words[1:], self.spellings[1:]):
                f.write(word + " " + " ".join(tokenizer.piece(t) for t in spelling) + "\n")


def spell(word: str, tokenizer: Tokenizer) -> tuple[int, ...] | None:
    """The token ids of `word`, or None when the tokenizer cannot spell it faithfully."""
    ids = tuple(tokenizer.encode(word))
    if not ids or UNK_ID in ids or BLANK_ID in ids or tokenizer.decode(ids) != word:
        return None
    return ids


def build_lexicon(vocabulary: list[str], tokenizer: Tokenizer) -> Lexicon:
    """Lexicon of the vocabulary (duplicates and `<unk>` dropped; <unk> is index 0)."""
    words, spellings, skipped = [UNK_WORD], [()], []
    seen = {UNK_WORD}
    for word in vocabulary:
        if word in seen:
            continue
        seen.add(word)
        ids = spell(word, tokenizer)
        if ids is None:
            skipped.append(word)
            continue
        words.append(word)
        spellings.append(ids)
    if len(words) == 1:
        raise InputError(
            f"none of the {len(vocabulary)} vocabulary words can be spelled by the tokenizer {tokenizer.path}"
        )
    if skipped:
        log.warning(
            "lexicon: %d of %d words not spellable by the tokenizer, left out: %s",
            len(skipped),
            len(vocabulary),
            ", ".join(skipped[:10]),
        )
    return Lexicon(tuple(words), tuple(spellings), tuple(skipped))
