"""Configuration of checkpoint averaging (Hydra group `average`; `python -m asr.average`)."""

from dataclasses import dataclass
from typing import ClassVar

from asr.utils.checks import AT_LEAST_ONE, Check, one_of


@dataclass
class AverageConfig:
    num: int = 5  # how many checkpoints to average
    # last: the newest num (epoch ends, else periodic ones) | best: the num epoch ends of lowest dev loss
    # | steps: the newest num of every kind, periodic ones too (the last steps of training)
    by: str = "last"
    out: str = ""  # the checkpoint written; empty = <exp_dir>/checkpoints/avg-<by><num>.pt

    CHECKS: ClassVar[dict[str, Check]] = {"num": AT_LEAST_ONE, "by": one_of("last", "best", "steps")}
