"""Configuration of the acoustic model (Hydra group `model`)."""

from dataclasses import dataclass
from typing import ClassVar

from asr.utils.checks import AT_LEAST_ONE, NON_NEGATIVE, Check, between, one_of


@dataclass
class ModelConfig:
    name: str = "blstm"
    num_layers: int = 4
    hidden_size: int = 320  # cells per direction
    bidirectional: bool = True
    bottleneck: int = 0  # linear bottleneck before the output layer; 0 = none
    stack_frames: int = 3  # concatenate this many neighbouring frames (current + following)...
    subsample: int = 3  # ...and keep every Nth stacked frame
    dropout: float = 0.1
    head: str = "ctc"  # output layer: ctc (tokens + blank) | frame_ce (pdf ids); asr.models.blstm.HEADS
    num_pdfs: int = 0  # frame_ce: outputs; 0 = from the transition model, else the alignments' largest pdf id + 1

    CHECKS: ClassVar[dict[str, Check]] = {
        "name": one_of("blstm"),
        "num_layers": AT_LEAST_ONE,
        "hidden_size": AT_LEAST_ONE,
        "bottleneck": NON_NEGATIVE,
        "stack_frames": AT_LEAST_ONE,
        "subsample": AT_LEAST_ONE,
        "dropout": between(0.0, 1.0, high_open=True),
        "head": one_of("ctc", "frame_ce"),
        "num_pdfs": NON_NEGATIVE,
    }
