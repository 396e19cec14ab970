"""`python -m asr.text`: train the sentencepiece tokenizer on the training transcripts."""

from pathlib import Path

from asr.stage import stage_main


@stage_main(
    "tokenizer",
    groups=["tokenizer"],
    uses=["data"],
    reads="data.data_dir/<data.train_set>/text",
    writes="tokenizer.lang_dir/: the sentencepiece model and tokens.txt",
)
def main(cfg) -> None:
    from asr.text.tokenizer import build_tokenizer  # here, not above: --help answers without importing torch

    build_tokenizer(Path(cfg.data.data_dir) / cfg.data.train_set / "text", cfg.tokenizer)


if __name__ == "__main__":
    main()
