"""Configuration of the batch-size sweep (Hydra group `sweep`; `python -m asr.sweep`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from asr.utils.checks import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, Check, between, each, one_of

BASES = ("ssgd", "adpsgd", "hadpsgd")
SUFFIXES = ("_random_ring", "_delay_by_one")  # distributed.topology=random_ring, distributed.delay_by_one=true


@dataclass(frozen=True)
class Variant:
    """An algorithm of the sweep: its name, e.g. adpsgd_random_ring_delay_by_one."""

    base: str
    topology: str = "ring"
    delay_by_one: bool = False


def parse_algorithm(name: str) -> Variant:
    """ssgd | adpsgd | hadpsgd, then optionally _random_ring, then optionally _delay_by_one."""
    rest, delay = (name[: -len(SUFFIXES[1])], True) if name.endswith(SUFFIXES[1]) else (name, False)
    rest, topology = (rest[: -len(SUFFIXES[0])], "random_ring") if rest.endswith(SUFFIXES[0]) else (rest, "ring")
    if rest not in BASES or (rest == "ssgd" and (delay or topology != "ring")):
        raise ValueError(f"{name!r}: choose ssgd, or adpsgd/hadpsgd, each optionally followed by _random_ring and then _delay_by_one")
    return Variant(rest, topology, delay)


def algorithm_name(value) -> str | None:
    try:
        parse_algorithm(str(value))
    except ValueError as err:
        return str(err)
    return None


@dataclass
class SweepConfig:
    # Which algorithms, with how many simulated learners (asr/distributed/timed.py).
    algorithms: list = field(default_factory=lambda: ["ssgd", "adpsgd", "adpsgd_random_ring", "adpsgd_delay_by_one", "hadpsgd"])
    learners: int = 16
    learners_per_node: int = 4  # hadpsgd
    global_batches: list = field(default_factory=lambda: [16, 32, 64, 128, 256, 512])  # utterances per step, all learners
    epochs: int = 3
    # The baseline: one learner at this batch with `lr`; every run's lr is scaled from it.
    base_batch: int = 16
    # Optimisation (the paper's): lr x (global batch / base_batch) under lr_scaling=linear
    # (sqrt: its square root), reached by a linear warm-up over warmup_epochs, then multiplied
    # by lr_decay after every epoch.
    optimizer: str = "sgd"  # sgd | adam
    lr: float = 0.2
    lr_scaling: str = "linear"  # linear | sqrt | none
    momentum: float = 0.9
    nesterov: bool = True
    warmup_epochs: float = 0.5
    lr_decay: float = 0.5
    grad_clip: float = 0.0  # 0 = off: a step too large for the landscape shows, it is not clipped away
    # The model: model.* with these sizes (0 = model.*'s own).
    num_layers: int = 1
    hidden_size: int = 64
    # Timing of the simulated learners: speeds drawn uniformly in [1 - speed_spread, 1 + speed_spread]
    # (or `speeds`, one per learner), each step's time x [1 - jitter, 1 + jitter], a weight
    # exchange taking exchange_time (in steps of a speed-1 learner).
    speeds: list = field(default_factory=list)
    speed_spread: float = 0.2
    jitter: float = 0.1
    exchange_time: float = 0.5
    # Seeds (data order, timing; initial weights too unless same_init): `seeds` for every run;
    # extra_seeds for the baseline, and for every point within close_margin of the tolerance.
    # same_init: every run starts from the weights the experiment's `seed` draws.
    same_init: bool = True
    seeds: list = field(default_factory=lambda: [1])
    extra_seeds: list = field(default_factory=lambda: [2, 3])
    close_margin: float = 0.03
    # A run converges when its held-out loss (mean over seeds) is at most the baseline's x (1 + tolerance).
    tolerance: float = 0.05
    max_train_utts: int = 0  # train on the first N utterances only (0 = all): a quicker sweep
    jobs: int = 2  # runs trained side by side, in processes of train.threads / jobs threads each
    out_dir: str = "${exp_dir}/sweep"

    CHECKS: ClassVar[dict[str, Check]] = {
        "algorithms": each(algorithm_name), "learners": AT_LEAST_ONE, "learners_per_node": AT_LEAST_ONE,
        "global_batches": each(AT_LEAST_ONE), "epochs": AT_LEAST_ONE, "base_batch": AT_LEAST_ONE,
        "optimizer": one_of("sgd", "adam"), "lr": POSITIVE, "lr_scaling": one_of("none", "linear", "sqrt"),
        "momentum": between(0.0, 1.0, high_open=True), "warmup_epochs": NON_NEGATIVE, "lr_decay": POSITIVE, "grad_clip": NON_NEGATIVE,
        "num_layers": NON_NEGATIVE, "hidden_size": NON_NEGATIVE, "speeds": each(POSITIVE), "speed_spread": between(0.0, 1.0, high_open=True),
        "jitter": between(0.0, 1.0, high_open=True), "exchange_time": NON_NEGATIVE, "seeds": each(NON_NEGATIVE),
        "extra_seeds": each(NON_NEGATIVE), "close_margin": NON_NEGATIVE, "tolerance": NON_NEGATIVE, "max_train_utts": NON_NEGATIVE,
        "jobs": AT_LEAST_ONE,
    }
