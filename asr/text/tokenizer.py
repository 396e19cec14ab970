"""Subword tokenizer (sentencepiece) whose ids are the CTC output indices.

Id mapping: the sentencepiece model is trained with its *pad* piece at id 0, named
`<blk>`, and `<unk>` at id 1 (no bos/eos). Pad is a control piece: `encode` never produces
it and `decode` renders it as nothing, so sentencepiece ids are used unchanged as model
output indices, with the CTC blank at 0 and no offset arithmetic anywhere.

Transcript tags (`[noise]`, `[laughter]`, `[vocalized-noise]`) are user-defined symbols
written with their word-boundary mark (`▁[noise]`), so each tag is exactly one token and
one CTC emission. A tag is a whole word on output too: a piece emitted right after it starts
a new word even without its own '▁' (greedy CTC can emit `▁[noise] t`, which must not become
the word `[noise]t`). Partial words (`ab-`) need nothing special: `-` is an ordinary character.

Files in the language dir, for a model named `<type><N>` (e.g. `bpe300`):
`<type><N>.model` (sentencepiece), `<type><N>.vocab` (piece<TAB>score, as sentencepiece
writes it), `tokens.txt` (`<token> <id>` per line in id order, the k2/icefall convention) and
`<type><N>.model.json` (the model's size and sha1, written before it): sentencepiece loads a
truncated model without a word (fewer pieces), so every reader checks the model against it.
"""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path
from typing import Iterable

import sentencepiece as spm

from asr.utils.atomic import atomic_open
from asr.utils.errors import InputError
from asr.utils.record import verify, why_rerun, write_record

log = logging.getLogger(__name__)

BLANK_ID = 0
BLANK_PIECE = "<blk>"
UNK_ID = 1
UNK_PIECE = "<unk>"
WORD_BOUNDARY = "\u2581"  # sentencepiece's '▁'


RERUN = "python -m asr.text"


def model_name(model_type: str, vocab_size: int) -> str:
    return f"{model_type}{vocab_size}"


def tokenizer_model_path(tokenizer_cfg) -> Path:
    """Where the tokenizer stage writes (and every later stage finds) the model."""
    return Path(tokenizer_cfg.lang_dir) / f"{model_name(tokenizer_cfg.model_type, tokenizer_cfg.vocab_size)}.model"


def train_sentencepiece(
    texts: Iterable[str],
    model_type: str,
    vocab_size: int,
    character_coverage: float = 1.0,
    user_symbols: Iterable[str] = (),
) -> bytes:
    """Train a sentencepiece model in memory and return its serialized proto."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        model_type=model_type,
        vocab_size=vocab_size,
        # A small corpus may not support vocab_size pieces; take what it supports.
        hard_vocab_limit=False,
        character_coverage=character_coverage,
        pad_id=BLANK_ID,
        pad_piece=BLANK_PIECE,
        unk_id=UNK_ID,
        unk_piece=UNK_PIECE,
        unk_surface=UNK_PIECE,  # so an unknown piece decodes to a word scoring can drop
        bos_id=-1,
        eos_id=-1,
        user_defined_symbols=[WORD_BOUNDARY + s for s in user_symbols],
        num_threads=1,  # deterministic, and the machine is shared
        minloglevel=2,
    )
    return model.getvalue()


class Tokenizer:
    """Text <-> CTC token ids. Id 0 is the blank and never appears in `encode` output."""

    def __init__(self, model_path: str | os.PathLike):
        self.path = Path(model_path)
        if not self.path.is_file():
            raise InputError(f"{self.path}: tokenizer model not found; run `python -m asr.text` first")
        verify(self.path, "tokenizer model")
        self.sp = spm.SentencePieceProcessor()
        try:
            self.sp.load(str(self.path))
        except (OSError, RuntimeError) as err:
            raise InputError(
                f"{self.path}: not a readable sentencepiece model ({err}); delete it and re-run the tokenizer stage"
            ) from None
        if self.sp.piece_to_id(BLANK_PIECE) != BLANK_ID or not self.sp.is_control(BLANK_ID):
            raise InputError(
                f"{self.path}: id {BLANK_ID} is not the CTC blank {BLANK_PIECE!r}; train it with `python -m asr.text`"
            )

    @classmethod
    def from_bytes(cls, proto: bytes) -> "Tokenizer":
        tok = cls.__new__(cls)
        tok.path = Path("<memory>")
        tok.sp = spm.SentencePieceProcessor(model_proto=proto)
        return tok

    @property
    def vocab_size(self) -> int:
        """Number of model outputs, blank included."""
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text)

    def decode(self, ids: Iterable[int]) -> str:
        ids = [int(i) for i in ids if i != BLANK_ID]
        return " ".join(word for word, _, _ in self.word_spans(ids))

    def _is_tag(self, token_id: int) -> bool:
        piece = self.piece(token_id)
        return piece.startswith(WORD_BOUNDARY + "[") and piece.endswith("]") and len(piece) > 3

    def piece(self, token_id: int) -> str:
        return self.sp.id_to_piece(int(token_id))

    def word_spans(self, ids: list[int]) -> list[tuple[str, int, int]]:
        """Split a blank-free token sequence into words.

        Returns (word, first, last) with `first`/`last` the inclusive positions in `ids` of
        the word's tokens, so callers can map them to emission frames. A word starts at
        each piece beginning with '▁' (sentencepiece's word-boundary mark) and after each tag.
        """
        groups: list[tuple[int, int]] = []
        for pos, token in enumerate(ids):
            if not groups or self.piece(token).startswith(WORD_BOUNDARY) or self._is_tag(ids[pos - 1]):
                groups.append((pos, pos))
            else:
                groups[-1] = (groups[-1][0], pos)
        spans = []
        for first, last in groups:
            # A group can decode to nothing (a lone '▁') or, defensively, to several words.
            for word in self.sp.decode(ids[first : last + 1]).split():
                spans.append((word, first, last))
        return spans

    def write_vocab(self, path: str | os.PathLike) -> None:
        with atomic_open(path, encoding="utf-8") as f:
            for i in range(self.vocab_size):
                f.write(f"{self.piece(i)}\t{self.sp.get_score(i):g}\n")

    def write_tokens_txt(self, path: str | os.PathLike) -> None:
        with atomic_open(path, encoding="utf-8") as f:
            for i in range(self.vocab_size):
                f.write(f"{self.piece(i)} {i}\n")


def read_transcripts(text_file: str | os.PathLike) -> list[str]:
    """The transcripts of a Kaldi `text` file, without keys; empty transcripts dropped."""
    from asr.kaldi.table import read_table

    text_file = Path(text_file)
    if not text_file.is_file():
        raise InputError(f"{text_file}: training transcripts not found; run the prepare stage first")
    texts = [t for t in read_table(text_file, allow_empty_value=True).values() if t.strip()]
    if not texts:
        raise InputError(f"{text_file}: no non-empty transcripts to train the tokenizer on")
    return texts


def tokenizer_options(tokenizer_cfg) -> dict:
    """What changes the model (where it goes does not)."""
    names = ("model_type", "vocab_size", "character_coverage")
    return {**{k: getattr(tokenizer_cfg, k) for k in names}, "user_symbols": list(tokenizer_cfg.user_symbols)}


def build_tokenizer(text_file: str | os.PathLike, tokenizer_cfg) -> Path:
    """Train the tokenizer on a Kaldi `text` file unless its record says it is up to date."""
    model_path = tokenizer_model_path(tokenizer_cfg)
    vocab_path = model_path.with_suffix(".vocab")
    tokens_path = model_path.parent / "tokens.txt"
    options, name = tokenizer_options(tokenizer_cfg), model_path.stem
    reason = why_rerun(model_path.parent, "tokenizer", options, [text_file], name=name)
    if reason is None:
        log.info("tokenizer %s is up to date; skipping", model_path)
        return model_path
    log.info("training the tokenizer: %s", reason)
    texts = read_transcripts(text_file)
    proto = train_sentencepiece(
        texts,
        model_type=tokenizer_cfg.model_type,
        vocab_size=tokenizer_cfg.vocab_size,
        character_coverage=tokenizer_cfg.character_coverage,
        user_symbols=tokenizer_cfg.user_symbols,
    )
    tok = Tokenizer.from_bytes(proto)
    tok.write_vocab(vocab_path)
    tok.write_tokens_txt(tokens_path)
    with atomic_open(model_path, "wb") as f:
        f.write(proto)
    outputs = {model_path.name: True, vocab_path.name: True, tokens_path.name: True}
    write_record(model_path.parent, "tokenizer", RERUN, options, [text_file], outputs, name=name)
    if tok.vocab_size < tokenizer_cfg.vocab_size:
        log.warning(
            "%s: the %d transcripts support only %d pieces (asked for %d)",
            model_path,
            len(texts),
            tok.vocab_size,
            tokenizer_cfg.vocab_size,
        )
    log.info(
        "trained %s tokenizer with %d tokens (blank = 0) on %d transcripts -> %s",
        tokenizer_cfg.model_type,
        tok.vocab_size,
        len(texts),
        model_path,
    )
    return model_path
