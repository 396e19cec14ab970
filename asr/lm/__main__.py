"""`python -m asr.lm`: train the word n-gram LMs on the training transcripts (see asr.lm.build)."""

from asr.stage import stage_main
from asr.lm.build import build_lms


@stage_main("lm")
def main(cfg) -> None:
    build_lms(cfg)


if __name__ == "__main__":
    main()
