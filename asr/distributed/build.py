"""The updater of distributed.algorithm for this learner (the plain one for a single learner)."""

from __future__ import annotations

import logging

import torch

from asr.distributed.adpsgd import AdpsgdUpdater
from asr.distributed.context import DistributedContext
from asr.distributed.hadpsgd import describe, learners_per_node, make_groups
from asr.distributed.ssgd import SsgdUpdater
from asr.distributed.topology import Layout, node_groups
from asr.train.updater import Updater, build_updater

log = logging.getLogger(__name__)


def build_training_updater(model: torch.nn.Module, cfg, ctx: DistributedContext, total_steps: int = 0) -> Updater:
    """`total_steps`: this learner's updates over the whole training (for train.final_lr)."""
    tcfg = cfg.train
    if not ctx.distributed:
        return build_updater(model, tcfg, total_steps=total_steps)
    if ctx.algorithm == "ssgd":
        return build_updater(
            model, tcfg, ctx.world_size, SsgdUpdater, total_steps=total_steps, rank=ctx.rank, timeout_s=ctx.timeout_s
        )
    per_node = learners_per_node(ctx, cfg.distributed.learners_per_node, ctx.algorithm)
    node_groups(ctx.world_size, per_node)  # a clear error if it does not divide the learners
    layout = Layout(ctx.rank, ctx.world_size, per_node)
    node_group, exchange_group = make_groups(layout)
    log.info("%s: %s", ctx.algorithm, describe(layout))
    return build_updater(
        model, tcfg, ctx.world_size, AdpsgdUpdater, total_steps=total_steps,
        layout=layout, node_group=node_group, exchange_group=exchange_group, timeout_s=ctx.timeout_s,
    )
