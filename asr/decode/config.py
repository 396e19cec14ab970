"""Configuration of decoding (Hydra group `decode`)."""

from dataclasses import dataclass, field


@dataclass
class DecodeConfig:
    name: str = "greedy"
    kind: str = "greedy"  # greedy | beam_lm
    sets: list = field(default_factory=list)  # data sets to decode; empty -> [data.eval_set]
    checkpoint: str = "last"  # last | best | path
    batch_size: int = 32
    frame_shift_ms: float = 10.0
