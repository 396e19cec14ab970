"""Configuration of the batch-size sweep (Hydra group `sweep`; `python -m asr.sweep`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import ClassVar

from asr.utils.checks import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, Check, between, each, one_of

BASES = ("ssgd", "adpsgd", "hadpsgd")
TOPOLOGY_SUFFIXES = {"_random_ring": "random_ring", "_exponential": "exponential"}  # distributed.topology
DELAY_SUFFIX = "_delay_by_one"  # distributed.delay_by_one=true
LR_FACTOR = re.compile(r"^(?P<rest>.+)_lr_x(?P<factor>[0-9]+(?:\.[0-9]+)?)$")


@dataclass(frozen=True)
class Variant:
    """An algorithm of the sweep: its name, e.g. adpsgd_random_ring_delay_by_one."""

    base: str
    topology: str = "ring"
    delay_by_one: bool = False
    # A control: the updater's lr is lr_factor x the run's, so its critical lr must come out
    # lr_factor times lower (ssgd_lr_x4: 4x lower), or the sweep cannot see a difference.
    lr_factor: float = 1.0


def parse_algorithm(name: str) -> Variant:
    """ssgd | adpsgd | hadpsgd, then optionally _random_ring or _exponential, then optionally
    _delay_by_one, then optionally _lr_x<factor> (a control)."""
    rest, factor = name, 1.0
    if match := LR_FACTOR.match(rest):
        rest, factor = match["rest"], float(match["factor"])
    rest, delay = (rest[: -len(DELAY_SUFFIX)], True) if rest.endswith(DELAY_SUFFIX) else (rest, False)
    topology = "ring"
    for suffix, value in TOPOLOGY_SUFFIXES.items():
        if rest.endswith(suffix):
            rest, topology = rest[: -len(suffix)], value
    if rest not in BASES or (rest == "ssgd" and (delay or topology != "ring")) or factor <= 0:
        raise ValueError(
            f"{name!r}: choose ssgd, or adpsgd/hadpsgd, each optionally followed by _random_ring or _exponential "
            "and then _delay_by_one; any of them may end in _lr_x<factor> (a control)"
        )
    return Variant(rest, topology, delay, factor)


def algorithm_name(value) -> str | None:
    try:
        parse_algorithm(str(value))
    except ValueError as err:
        return str(err)
    return None


def ascending(values) -> str | None:
    return None if list(values) == sorted(set(values)) else "list the values once each, ascending"


def geometric(values) -> str | None:
    """Ascending with one ratio between neighbours: 'n points lower' is one lr factor."""
    values = list(values)
    if problem := ascending(values) or each(POSITIVE)(values):
        return problem
    ratios = [b / a for a, b in zip(values, values[1:])]
    return (
        None
        if all(math.isclose(r, ratios[0], rel_tol=1e-6) for r in ratios)
        else "give a geometric grid (e.g. each lr 2x the last)"
    )


@dataclass
class SweepConfig:
    # Which algorithms, with how many simulated learners (asr/distributed/timed.py).
    algorithms: list = field(
        default_factory=lambda: [
            "ssgd",
            "adpsgd",
            "adpsgd_random_ring",
            "adpsgd_exponential",
            "adpsgd_delay_by_one",
            "hadpsgd",
            "ssgd_lr_x4",
        ]
    )
    learners: int = 16
    learners_per_node: int = 4  # hadpsgd
    # Every run trains `epochs` epochs. budget=epochs: one pass over the data each, whatever the
    # batch, so a larger batch takes fewer updates (the large-batch question: reach the same loss
    # on the same data with fewer, larger steps). budget=updates: batch / base_batch passes each,
    # so every run makes the baseline's updates (a small corpus, where the first rule leaves the
    # largest batches a few dozen updates, as a large corpus such as SWB-2000 never does).
    epochs: int = 5
    budget: str = "epochs"  # epochs | updates
    # The baseline, calibrated first: one learner at base_batch, every lr of baseline_lrs with the
    # first seed, the best lr then with every seed; its held-out loss x (1 + tolerance) is the line.
    base_batch: int = 16
    baseline_lrs: list = field(default_factory=lambda: [0.1, 0.2, 0.4, 0.8])
    # critical_lr: every algorithm at critical_batch, every lr of critical_lrs (no scaling).
    critical_batch: int = 64
    critical_lrs: list = field(default_factory=lambda: [0.2, 0.4, 0.8, 1.6, 3.2, 6.4])
    # largest_converging_batch: every algorithm at every global batch (utterances per step, all
    # learners), lr = the baseline's best x (batch / base_batch) (linear; sqrt: its root).
    global_batches: list = field(default_factory=lambda: [16, 32, 64, 128, 256])
    lr_scaling: str = "linear"  # linear | sqrt | none
    # Each run's training config is `train` with these overrides (any train.* key: the regime,
    # e.g. the objective, is a train setting); the lr and its warm-up are the sweep's.
    train: dict = field(
        default_factory=lambda: {
            "optimizer": "sgd",
            "momentum": 0.9,
            "nesterov": True,
            "weight_decay": 0.0,
            "lr_decay": 0.5,
            "final_lr": 0.0,
            "grad_clip": 0.0,
        }
    )
    warmup_epochs: float = 0.5  # a linear warm-up to each run's lr over this many epochs
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
    # extra_seeds for the baseline's best lr, and for every point within close_margin of the
    # tolerance (at least 3 seeds in all there).
    same_init: bool = True
    seeds: list = field(default_factory=lambda: [1])
    extra_seeds: list = field(default_factory=lambda: [2, 3])
    close_margin: float = 0.03
    # A point converges when no seed diverged and its held-out loss is at most the baseline's
    # x (1 + tolerance), on average over its seeds (each against the baseline of its seed).
    tolerance: float = 0.05
    # Train on the first N utterances only (0 = all): a quicker sweep; a multiple of every global
    # batch, so that every run's epoch is cut into the same full batches.
    max_train_utts: int = 3072
    # The gradient noise scale (asr/sweep/noise_scale.py) at the baseline's weights after each
    # epoch: B_simple from mean gradients over noise_batches=[small, big] (the big a multiple of
    # the small; [] = base_batch and the sweep's largest batch that is a multiple of it), over
    # noise_rounds big batches; 0 rounds: not measured.
    noise_batches: list = field(default_factory=list)
    noise_rounds: int = 8
    # python -m asr.sweep.diagnose: which of its runs (asr/sweep/diagnose/diagnostics.py DIAGNOSTICS), by name; [] = all
    diagnostics: list = field(default_factory=list)
    diagnostic_batches: list = field(default_factory=list)  # its global batches; [] = base_batch and critical_batch
    # A run's nodes stepped as one batched model (asr/sweep/batched.py: equal-length samples, no
    # dropout), equal to each node alone to float round-off; false: each node alone.
    batched_nodes: bool = False
    jobs: int = 2  # runs trained side by side, in processes of train.threads / jobs threads each
    out_dir: str = "${exp_dir}/sweep"

    CHECKS: ClassVar[dict[str, Check]] = {
        "algorithms": each(algorithm_name),
        "learners": AT_LEAST_ONE,
        "learners_per_node": AT_LEAST_ONE,
        "epochs": AT_LEAST_ONE,
        "budget": one_of("epochs", "updates"),
        "base_batch": AT_LEAST_ONE,
        "baseline_lrs": lambda v: ascending(v) or each(POSITIVE)(v),
        "critical_batch": AT_LEAST_ONE,
        "critical_lrs": geometric,
        "global_batches": lambda v: ascending(v) or each(AT_LEAST_ONE)(v),
        "lr_scaling": one_of("none", "linear", "sqrt"),
        "warmup_epochs": NON_NEGATIVE,
        "num_layers": NON_NEGATIVE,
        "hidden_size": NON_NEGATIVE,
        "speeds": each(POSITIVE),
        "speed_spread": between(0.0, 1.0, high_open=True),
        "jitter": between(0.0, 1.0, high_open=True),
        "exchange_time": NON_NEGATIVE,
        "seeds": each(NON_NEGATIVE),
        "extra_seeds": each(NON_NEGATIVE),
        "close_margin": NON_NEGATIVE,
        "tolerance": NON_NEGATIVE,
        "max_train_utts": NON_NEGATIVE,
        "noise_batches": lambda v: each(AT_LEAST_ONE)(v) or (None if len(v) in (0, 2) else "give [small, big] or []"),
        "noise_rounds": NON_NEGATIVE,
        "diagnostic_batches": each(AT_LEAST_ONE),
        "jobs": AT_LEAST_ONE,
    }
