"""`python -m asr.average [average.num=5] [average.by=last|best]`: the mean of an experiment's
last or best checkpoints -> exp_dir/checkpoints/avg-<by><num>.pt (decode.checkpoint=avg-last5)."""

from asr.stage import stage_main
from asr.utils.memory import freeze_imports


@stage_main(
    "average",
    groups=["average"],
    reads="exp_dir/checkpoints/ (epoch-*.pt, step-*.pt, best.pt)",
    writes="exp_dir/checkpoints/avg-<by><num>.pt (or average.out)",
)
def main(cfg) -> None:
    from asr.average.average import average  # here, not above: --help answers without importing torch

    freeze_imports()

    average(cfg)


if __name__ == "__main__":
    main()
