"""`python -m asr.tune decode=beam_lm`: LM weight and word score tuned on the dev set."""

from asr.stage import stage_main
from asr.tune import tune


@stage_main("tune")
def main(cfg) -> None:
    tune(cfg)


if __name__ == "__main__":
    main()
