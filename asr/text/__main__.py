"""`python -m asr.text`: train the sentencepiece tokenizer on the training transcripts."""

from pathlib import Path

from asr.stage import stage_main
from asr.text.tokenizer import build_tokenizer


@stage_main("tokenizer")
def main(cfg) -> None:
    build_tokenizer(Path(cfg.data.data_dir) / cfg.data.train_set / "text", cfg.tokenizer)


if __name__ == "__main__":
    main()
