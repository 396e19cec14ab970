"""`python -m asr.lm`: train the word n-gram LMs on the training transcripts (see asr.lm.build)."""

from asr.stage import stage_main


@stage_main(
    "lm",
    groups=["lm"],
    uses=["data", "tokenizer"],
    reads="the training transcripts (data.data_dir/<data.train_set>/text)",
    writes="lm.dir/: <N>gram.bin KenLM n-grams, words.txt",
)
def main(cfg) -> None:
    from asr.lm.build import build_lms  # here, not above: --help answers without importing torch

    build_lms(cfg)


if __name__ == "__main__":
    main()
