"""`python -m asr.average [average.num=5] [average.by=last|best]`: the mean of an experiment's
last or best checkpoints -> exp_dir/checkpoints/avg-<by><num>.pt (decode.checkpoint=avg-last5)."""

from asr.average.average import average
from asr.stage import stage_main


@stage_main("average")
def main(cfg) -> None:
    average(cfg)


if __name__ == "__main__":
    main()
