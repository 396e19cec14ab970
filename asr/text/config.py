"""Configuration of the subword tokenizer (Hydra group `tokenizer`)."""

from dataclasses import dataclass, field
from typing import ClassVar

from asr.utils.checks import AT_LEAST_ONE, Check, between, one_of


@dataclass
class TokenizerConfig:
    lang_dir: str = "lang"  # the model goes to <lang_dir>/<model_type><vocab_size>.model
    model_type: str = "bpe"  # sentencepiece model type: bpe | unigram | char
    vocab_size: int = 300  # upper bound: a small training text may support fewer pieces
    character_coverage: float = 1.0
    # Transcript tags kept whole: each becomes one token (with its word boundary).
    user_symbols: list = field(default_factory=lambda: ["[noise]", "[laughter]", "[vocalized-noise]"])

    CHECKS: ClassVar[dict[str, Check]] = {
        "model_type": one_of("bpe", "unigram", "char", "word"),
        "vocab_size": AT_LEAST_ONE,
        "character_coverage": between(0.5, 1.0),
    }
