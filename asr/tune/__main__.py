"""`python -m asr.tune decode=beam_lm`: LM weight and word score tuned on the dev set."""

from asr.stage import stage_main
from asr.utils.memory import freeze_imports


@stage_main(
    "tune",
    groups=["decode"],
    uses=["data", "features", "tokenizer", "lm", "model"],
    reads="the checkpoint decode.checkpoint, the dev set's features, the LM",
    writes="decode.tuning_file (exp_dir/lm_tuning.json): the best LM weight and word score",
)
def main(cfg) -> None:
    from asr.tune.grid import tune  # here, not above: --help answers without importing torch

    freeze_imports()

    tune(cfg)


if __name__ == "__main__":
    main()
