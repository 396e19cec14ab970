"""Configuration of the batch-size sweep (Hydra group `sweep`; `python -m asr.sweep`)."""

from dataclasses import dataclass, field
from typing import ClassVar

from asr.utils.checks import AT_LEAST_ONE, NON_NEGATIVE, Check, each, one_of, subset_of


@dataclass
class SweepConfig:
    algorithms: list = field(default_factory=lambda: ["ssgd", "adpsgd"])  # any of ssgd, adpsgd, hadpsgd
    learners: int = 8  # virtual learners (asr.distributed.simulation)
    learners_per_node: int = 2  # hadpsgd only
    global_batches: list = field(default_factory=lambda: [32, 64, 128, 256])  # utterances per step, all learners
    epochs: int = 2
    # lr = train.lr x (global batch / reference_batch) under lr_scaling=linear (sqrt: its root),
    # reached by train.warmup_steps of warm-up and annealed by train.lr_decay per epoch.
    lr_scaling: str = "linear"  # none | linear | sqrt
    reference_batch: int = 32
    max_train_utts: int = 0  # train on the first N utterances only (0 = all): a quicker sweep
    consensus_every_steps: int = 0  # learners average all weights this often (0 = train.checkpoint_every_steps), and at epoch ends
    out_dir: str = "${exp_dir}/sweep"

    CHECKS: ClassVar[dict[str, Check]] = {
        "algorithms": subset_of("ssgd", "adpsgd", "hadpsgd"), "learners": AT_LEAST_ONE, "learners_per_node": AT_LEAST_ONE,
        "global_batches": each(AT_LEAST_ONE), "epochs": AT_LEAST_ONE, "lr_scaling": one_of("none", "linear", "sqrt"),
        "reference_batch": AT_LEAST_ONE, "max_train_utts": NON_NEGATIVE, "consensus_every_steps": NON_NEGATIVE,
    }
