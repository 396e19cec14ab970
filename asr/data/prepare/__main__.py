"""`python -m asr.data.prepare`: the Kaldi data dirs of the corpora in `data`."""

from omegaconf import DictConfig

from asr.stage import stage_main


@stage_main(
    "prepare",
    groups=["data"],
    reads="the LDC corpus dirs data.swbd_dir, data.eval2000_dir, ...",
    writes="data.data_dir/<set>/: Kaldi data dirs; eval2000 stm and glm",
)
def main(cfg: DictConfig) -> None:
    from asr.data.prepare import prepare_data  # here, not above: --help answers without importing torch

    prepare_data(cfg.data)


if __name__ == "__main__":
    main()
