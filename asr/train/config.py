"""Configuration of training (Hydra group `train`)."""

from dataclasses import dataclass


@dataclass
class TrainConfig:
    epochs: int = 20
    max_frames: int = 20000  # batch size in input frames (length-bucketed batches)
    max_utts: int = 64
    optimizer: str = "adam"  # adam | sgd
    lr: float = 1e-3
    momentum: float = 0.9
    weight_decay: float = 0.0
    warmup_steps: int = 200
    lr_decay: float = 0.85  # per-epoch annealing after warm-up
    grad_clip: float = 5.0
    checkpoint_every_steps: int = 200
    keep_checkpoints: int = 3
    num_workers: int = 0
    threads: int = 2
    force: bool = False  # resume even if the model/data config changed
