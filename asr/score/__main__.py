"""`python -m asr.score [hydra overrides]`: score each decoded set (see asr.score.stage)."""

from omegaconf import DictConfig

from asr.stage import stage_main
from asr.score.stage import run


@stage_main("score")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
