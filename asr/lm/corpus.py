"""The LM training text and its vocabulary.

The text is the training transcripts as they are (noise tags, partial words and all: the
acoustic model emits them, so the LM must predict them; scoring removes them later), one
utterance a line without its id, plus any extra text (Fisher for SWB-2000). The vocabulary
(`words.txt`, `word count` per line, most frequent first) is what the decoder's lexicon is
built from.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator

from asr.utils.atomic import atomic_open
from asr.utils.errors import InputError
from asr.utils.record import verify
from asr.utils.textfile import iter_lines

# Tokens lmplz reserves; a transcript containing them would corrupt the model.
RESERVED = frozenset({"<s>", "</s>"})


def read_sentences(path: str | os.PathLike, has_ids: bool) -> Iterator[list[str]]:
    """Word lists of a Kaldi text file (has_ids) or a plain text file; empty lines skipped."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: LM training text not found; run the prepare stage or fix lm.extra_text")
    for lineno, line in iter_lines(path):
        words = line.split()[1:] if has_ids else line.split()
        reserved = RESERVED.intersection(words)
        if reserved:
            raise InputError(
                f"{path}:{lineno}: the words {sorted(reserved)} are reserved by the LM toolkit; remove them"
            )
        if words:
            yield words


def write_corpus(sources: Iterable[tuple[Path, bool]], text_path: Path, words_path: Path) -> tuple[int, int]:
    """Write the LM training text and its vocabulary; returns (sentences, running words)."""
    counts: Counter = Counter()
    sentences = 0
    with atomic_open(text_path, encoding="utf-8") as out:
        for path, has_ids in sources:
            for words in read_sentences(path, has_ids):
                out.write(" ".join(words) + "\n")
                counts.update(words)
                sentences += 1
    if sentences == 0:
        raise InputError(f"no LM training sentences in {', '.join(str(p) for p, _ in sources)}")
    with atomic_open(words_path, encoding="utf-8") as out:
        for word, count in sorted(counts.items(), key=lambda wc: (-wc[1], wc[0])):
            out.write(f"{word} {count}\n")
    return sentences, sum(counts.values())


def read_vocabulary(words_path: str | os.PathLike) -> list[str]:
    """The words of a `words.txt` (word count per line), in file order."""
    words_path = Path(words_path)
    if not words_path.is_file():
        raise InputError(f"{words_path}: LM vocabulary not found; run the LM stage (`python -m asr.lm`) first")
    verify(words_path, "LM vocabulary")
    with open(words_path, encoding="utf-8") as f:
        return [line.split()[0] for line in f if line.strip()]
