"""The updater of distributed.algorithm for this learner (the plain one for a single learner),
and the group of learners that step together on one batch (for the data sampler)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from asr.distributed.adpsgd import AdpsgdUpdater
from asr.distributed.context import DistributedContext, reduction_device
from asr.distributed.hadpsgd import describe, learners_per_node, make_groups
from asr.distributed.ssgd import SsgdUpdater, bucket_cap_mb
from asr.distributed.topology import Layout, node_groups
from asr.optim.updater import Updater, build_updater
from asr.utils.errors import InputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepGroup:
    """The learners that train one batch together, each on its share: all of them under SSGD,
    a node under ADPSGD/H-ADPSGD (whose nodes claim batches independently), or one learner."""

    size: int  # learners in the group
    rank: int  # this learner's place in it
    count: int  # groups training side by side (nodes)
    layout: Layout | None = None  # decentralized training's layout


def step_group(ctx: DistributedContext, cfg) -> StepGroup:
    check_exchange_options(cfg.distributed)
    if not ctx.distributed:
        return StepGroup(1, 0, 1)
    if ctx.algorithm == "ssgd":
        return StepGroup(ctx.world_size, ctx.rank, 1)
    per_node = learners_per_node(ctx, cfg.distributed.learners_per_node, ctx.algorithm)
    node_groups(ctx.world_size, per_node)  # a clear error if it does not divide the learners
    layout = Layout(ctx.rank, ctx.world_size, per_node, cfg.distributed.topology, int(cfg.seed))
    layout.ring  # a clear error now if the topology cannot join these nodes (exponential: a power of two)
    return StepGroup(per_node, layout.local_index, layout.num_nodes, layout)


def check_exchange_options(dcfg) -> None:
    """The exchange's options mean nothing without exchanges: say so rather than ignore them."""
    if dcfg.algorithm in ("adpsgd", "hadpsgd"):
        return
    for key, value, default in (("topology", dcfg.topology, "ring"), ("delay_by_one", dcfg.delay_by_one, False)):
        if value != default:
            raise InputError(
                f"distributed.{key}={value}: only ADPSGD and H-ADPSGD exchange weights; "
                f"use distributed=adpsgd or hadpsgd, or leave distributed.{key}={default}"
            )


def build_training_updater(
    model: torch.nn.Module,
    cfg,
    ctx: DistributedContext,
    total_steps: int = 0,
    scaler: torch.amp.GradScaler | None = None,
) -> Updater:
    """`total_steps`: this learner's expected updates over the whole training (for train.final_lr)."""
    tcfg, dcfg = cfg.train, cfg.distributed
    if not ctx.distributed:
        return build_updater(model, tcfg, total_steps=total_steps, scaler=scaler)
    common = {
        "timeout_s": ctx.timeout_s,
        "device": ctx.device,
        "bucket_cap_mb": bucket_cap_mb(getattr(dcfg, "bucket_cap_mb", "auto"), model),
        "count_device": reduction_device(ctx),
    }
    if ctx.algorithm == "ssgd":
        return build_updater(
            model,
            tcfg,
            ctx.world_size,
            SsgdUpdater,
            total_steps=total_steps,
            scaler=scaler,
            rank=ctx.rank,
            world_size=ctx.world_size,
            **common,
        )
    layout = step_group(ctx, cfg).layout
    groups = make_groups(layout)
    log.info("%s: %s", ctx.algorithm, describe(layout))
    return build_updater(
        model,
        tcfg,
        ctx.world_size,
        AdpsgdUpdater,
        total_steps=total_steps,
        scaler=scaler,
        layout=layout,
        groups=groups,
        restart_from_average=bool(getattr(dcfg, "restart_from_average", False)),
        delay_by_one=bool(dcfg.delay_by_one),
        **common,
    )
