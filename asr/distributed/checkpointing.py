"""Checkpoints of a job with several learners: one file, written by rank 0, read by all.

The checkpoint's model and optimizer state are the ones every learner holds after
`Updater.consensus()` (identical under SSGD; the average of all learners under ADPSGD), so
one copy is enough. What differs per learner is the random state (dropout), so the
checkpoint's `distributed` entry keeps every learner's:

    distributed   {"algorithm", "world_size", "spread", "rng_by_rank": [rng state of rank 0, 1, ...]}

On resume rank 0 picks the checkpoint (the newest readable one) and tells the others which,
so all learners restart from the same step even if a file is being rotated meanwhile.
"""

from __future__ import annotations

import logging
from pathlib import Path

from asr.distributed.context import DistributedContext
from asr.train.checkpoint import CheckpointDir, load_checkpoint, rng_state
from asr.utils.errors import InputError

log = logging.getLogger(__name__)


def load_resume_state(checkpoints: CheckpointDir, ctx: DistributedContext) -> dict | None:
    """The checkpoint to resume from (None: start afresh), the same on every learner."""
    if not ctx.distributed:
        return checkpoints.load_newest(map_location="cpu")
    choice: tuple[str, str] = ("none", "")
    state = None
    if ctx.is_writer:
        try:
            state = checkpoints.load_newest(map_location="cpu")
            choice = ("path", str(checkpoints.dir / f"step-{state['step']:09d}.pt")) if state else ("none", "")
        except InputError as err:
            choice = ("error", str(err))
    kind, value = ctx.broadcast_object(choice)
    if kind == "error":
        raise InputError(value)
    if kind == "none":
        return None
    return state if state is not None else load_checkpoint(Path(value), map_location="cpu")


def check_learners(state: dict, ctx: DistributedContext, path: Path) -> None:
    """Mid-epoch, the batches already trained depend on the number of learners: refuse a change."""
    saved = state.get("distributed", {}).get("world_size", 1)
    if saved == ctx.world_size:
        return
    if state["sampler"]["batches_done"] > 0:
        raise InputError(
            f"{path}: taken mid-epoch with {saved} learner(s), resumed with {ctx.world_size}; the batches of a partly "
            f"trained epoch depend on the number of learners. Resume with {saved} (--nproc), or delete the "
            "checkpoints after the last epoch end to go on from there"
        )
    log.warning("%s: trained so far with %d learner(s), continuing with %d", path, saved, ctx.world_size)


def learner_rng(state: dict, ctx: DistributedContext) -> dict | None:
    """This learner's saved random state (None: the saved run had no such learner)."""
    saved = state.get("distributed", {})
    by_rank = saved.get("rng_by_rank")
    if by_rank and saved.get("world_size") == ctx.world_size:
        return by_rank[ctx.rank]
    return state["rng"] if ctx.rank == 0 else None


def distributed_entry(ctx: DistributedContext, spread: float) -> dict:
    """The checkpoint's `distributed` entry (a collective: every learner calls it)."""
    return {
        "algorithm": ctx.algorithm,
        "world_size": ctx.world_size,
        "spread": float(spread),
        "rng_by_rank": ctx.gather_objects(rng_state()),
    }
