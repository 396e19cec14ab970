"""`python -m asr.data.prepare`: the Kaldi data dirs of the corpora in `data`."""

from omegaconf import DictConfig

from asr.data.prepare import prepare_data
from asr.stage import stage_main


@stage_main("prepare")
def main(cfg: DictConfig) -> None:
    prepare_data(cfg.data)


if __name__ == "__main__":
    main()
