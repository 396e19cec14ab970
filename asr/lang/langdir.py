"""A Kaldi lang dir (`data/lang`, written by `python -m asr.lang`, asr/lang/prepare.py) as
Python objects: the symbol tables, the phone classes, the HMM topology and the lexicon FSTs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import kaldi_hmm_gmm
import kaldifst  # after kaldi_hmm_gmm: with kaldifst 1.8 the other order deadlocks

from asr.utils.errors import InputError
from asr.utils.record import verify
from asr.utils.textfile import iter_lines

FILES = (
    "phones.txt",
    "words.txt",
    "topo",
    "L.fst",
    "L_disambig.fst",
    "oov.int",
    "phones/silence.csl",
    "phones/nonsilence.csl",
    "phones/disambig.int",
    "phones/optional_silence.int",
    "phones/align_lexicon.int",
)


def read_symbols(path: Path) -> dict[str, int]:
    table = {}
    for lineno, line in iter_lines(path):
        fields = line.split()
        if len(fields) != 2 or not fields[1].isdigit():
            raise InputError(f"{path}:{lineno}: expected '<symbol> <id>', got {line!r}; rebuild the lang dir")
        table[fields[0]] = int(fields[1])
    return table


def read_ints(path: Path) -> list[int]:
    text = path.read_text(encoding="ascii").replace(":", " ")
    try:
        return [int(field) for field in text.split()]
    except ValueError:
        raise InputError(f"{path}: expected integers; rebuild the lang dir (python -m asr.lang)") from None


@dataclass(frozen=True)
class Lang:
    dir: Path
    phones: dict[str, int]
    words: dict[str, int]
    silence_phones: list[int]
    nonsilence_phones: list[int]
    disambig_phones: list[int]
    optional_silence: int
    oov: int

    @classmethod
    def load(cls, lang_dir: str | Path) -> "Lang":
        lang_dir = Path(lang_dir)
        missing = [name for name in FILES if not (lang_dir / name).is_file()]
        if missing:
            raise InputError(f"{lang_dir}: not a complete lang dir, {missing[0]} is missing; run python -m asr.lang")
        for name in FILES:
            verify(lang_dir / name, "lang dir file")
        return cls(
            dir=lang_dir,
            phones=read_symbols(lang_dir / "phones.txt"),
            words=read_symbols(lang_dir / "words.txt"),
            silence_phones=read_ints(lang_dir / "phones/silence.csl"),
            nonsilence_phones=read_ints(lang_dir / "phones/nonsilence.csl"),
            disambig_phones=read_ints(lang_dir / "phones/disambig.int"),
            optional_silence=read_ints(lang_dir / "phones/optional_silence.int")[0],
            oov=read_ints(lang_dir / "oov.int")[0],
        )

    def topology(self) -> kaldi_hmm_gmm.HmmTopology:
        topo = kaldi_hmm_gmm.HmmTopology()
        topo.read((self.dir / "topo").read_text(encoding="ascii"))
        return topo

    def lexicon_fst(self, disambig: bool = False) -> kaldifst.StdVectorFst:
        return kaldifst.StdVectorFst.read(str(self.dir / ("L_disambig.fst" if disambig else "L.fst")))

    def word_ids(self, words: list[str]) -> list[int]:
        """Ids of the words; a word the lexicon lacks is the OOV word (<unk>)."""
        return [self.words.get(word, self.oov) for word in words]

    def pronunciations(self) -> dict[int, list[tuple[int, ...]]]:
        """word id -> its pronunciations as phone ids, from phones/align_lexicon.int."""
        path = self.dir / "phones/align_lexicon.int"
        prons: dict[int, list[tuple[int, ...]]] = {}
        for lineno, line in iter_lines(path):
            fields = line.split()
            if len(fields) < 3 or not all(f.isdigit() for f in fields):
                raise InputError(f"{path}:{lineno}: expected 'word word phone...' as integers; rebuild the lang dir")
            prons.setdefault(int(fields[0]), []).append(tuple(int(f) for f in fields[2:]))
        return prons

    @property
    def phone_names(self) -> dict[int, str]:
        return {i: p for p, i in self.phones.items()}

    @property
    def word_names(self) -> dict[int, str]:
        return {i: w for w, i in self.words.items()}
