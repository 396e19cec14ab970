"""Configuration of the subword tokenizer (Hydra group `tokenizer`)."""

from dataclasses import dataclass


@dataclass
class TokenizerConfig:
    lang_dir: str = "lang"
    model_type: str = "bpe"  # sentencepiece model type: bpe | unigram | char
    vocab_size: int = 300
    character_coverage: float = 1.0
