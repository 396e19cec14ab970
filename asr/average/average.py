"""The mean of checkpoints' weights, written as a checkpoint decoding loads like any other.

Candidates are the checkpoints of `<exp_dir>/checkpoints/`: the epoch-end copies
(`epoch-<E>.pt`, train.keep_epoch_checkpoints), the periodic `step-<N>.pt` and `best.pt`,
one per training step. `by=last` takes the newest `num` of them, epoch ends first: icefall's
`--avg` over epochs; periodic checkpoints only when there are fewer epoch ends than `num`.
`by=best` takes the `num` epoch ends of lowest dev loss (ESPnet's `valid.loss.ave`); a
mid-epoch checkpoint has no dev loss of its own weights, so it is no candidate. `by=steps`
takes the newest `num` of every kind, periodic ones included: the last steps of training, where
the learning rate has decayed (icefall's averaging over the last iterations); with a few epochs
and a decaying rate, epoch ends are too far apart to average (recipes/mini/RESULTS.md).

Floating-point tensors are averaged in float64 and stored in their own dtype; others (counts)
are the newest input's. The rest of the checkpoint (model_info, config, step) is the newest
input's, with `averaged` naming the inputs; it is written atomically.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from asr.models.checkpoint import CheckpointDir, load_checkpoint, save_checkpoint
from asr.utils.errors import InputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Candidate:
    path: Path
    step: int
    epoch_end: bool  # written at the end of an epoch: its dev loss is of these weights
    dev_loss: float


def candidates(checkpoints: CheckpointDir) -> list[Candidate]:
    """Every distinct checkpoint of the directory (one per step), oldest first."""
    paths = checkpoints.epoch_ends() + checkpoints.periodic() + [p for p in (checkpoints.best,) if p.is_file()]
    by_step: dict[int, Candidate] = {}
    for path in paths:
        state = load_checkpoint(path)
        epoch_end = state["sampler"].get("batches_done", 0) == 0 and state["epoch"] > 0
        dev_loss = float(state["progress"].get("dev_loss", math.nan)) if epoch_end else math.nan
        by_step.setdefault(int(state["step"]), Candidate(path, int(state["step"]), epoch_end, dev_loss))
    return [by_step[step] for step in sorted(by_step)]


def choose(found: list[Candidate], num: int, by: str, where: Path) -> list[Candidate]:
    """The `num` checkpoints `by` picks, oldest first; too few is an InputError saying how to get more."""
    ends = [c for c in found if c.epoch_end]
    if by == "best":
        scored = [c for c in ends if math.isfinite(c.dev_loss)]
        if len(scored) < num:
            raise InputError(
                f"{where}: {len(scored)} epoch-end checkpoints with a dev loss, average.num={num} asks for more; "
                "train with train.keep_epoch_checkpoints >= average.num, or lower average.num"
            )
        return sorted(sorted(scored, key=lambda c: c.dev_loss)[:num], key=lambda c: c.step)
    chosen = found[-num:] if by == "steps" or len(ends) < num else ends[-num:]
    if len(chosen) < num:
        raise InputError(
            f"{where}: {len(found)} checkpoints, average.num={num} asks for more; "
            "train with train.keep_epoch_checkpoints >= average.num, or lower average.num"
        )
    return chosen


def average_states(states: list[dict], names: list[str]) -> dict:
    """The newest state (the last) with the mean of all their model weights."""
    first = states[0]["model_info"]
    for state, name in zip(states[1:], names[1:]):
        if state["model_info"] != first or state["model"].keys() != states[0]["model"].keys():
            raise InputError(f"{name}: a different model from {names[0]}'s; average checkpoints of one training run")
    newest = states[-1]
    model = {}
    for key, value in newest["model"].items():
        if value.is_floating_point():
            total = sum(state["model"][key].to(torch.float64) for state in states)
            model[key] = (total / len(states)).to(value.dtype)
        else:
            model[key] = value.clone()
    return newest | {"model": model}


def output_path(cfg) -> Path:
    if cfg.average.out:
        return Path(cfg.average.out)
    return Path(cfg.exp_dir) / "checkpoints" / f"avg-{cfg.average.by}{cfg.average.num}.pt"


def average(cfg) -> Path:
    """The average stage: returns the checkpoint written."""
    checkpoints = CheckpointDir(Path(cfg.exp_dir) / "checkpoints")
    if not checkpoints.dir.is_dir():
        raise InputError(f"{checkpoints.dir}: no checkpoints; train first (python -m asr.train)")
    chosen = choose(candidates(checkpoints), int(cfg.average.num), str(cfg.average.by), checkpoints.dir)
    names = [c.path.name for c in chosen]
    state = average_states([load_checkpoint(c.path) for c in chosen], names)
    state["averaged"] = {"by": str(cfg.average.by), "checkpoints": names, "steps": [c.step for c in chosen]}
    out = save_checkpoint(output_path(cfg), state, stage="average")
    losses = ", ".join(f"{c.path.name} ({c.dev_loss:.4f})" if c.epoch_end else c.path.name for c in chosen)
    log.info(
        "averaged %d checkpoints (by %s): %s -> %s; decode it with decode.checkpoint=%s",
        len(chosen),
        cfg.average.by,
        losses,
        out,
        out.stem if out.parent == checkpoints.dir else out,
    )
    return out
