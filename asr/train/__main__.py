"""`python -m asr.train`: train the acoustic model (resumes from the newest checkpoint)."""

from asr.stage import stage_main
from asr.train.loop import train


@stage_main("train")
def main(cfg) -> None:
    train(cfg)


if __name__ == "__main__":
    main()
