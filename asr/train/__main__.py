"""`python -m asr.train`: train the acoustic model (resumes from the newest checkpoint)."""

from asr.stage import stage_main
from asr.utils.memory import freeze_imports, import_optimizer_machinery


@stage_main(
    "train",
    groups=["train", "model", "distributed"],
    uses=["data", "features", "tokenizer"],
    reads="the features of data.train_set and data.dev_set, the tokenizer",
    writes=(
        "exp_dir/: checkpoints/ (step-*, epoch-*, best.pt, last.pt), train_log.csv, loss.png, tensorboard/, "
        "log/train.log"
    ),
)
def main(cfg) -> None:
    from asr.train.loop import train  # here, not above: --help answers without importing torch

    import_optimizer_machinery()
    freeze_imports()

    train(cfg)


if __name__ == "__main__":
    main()
