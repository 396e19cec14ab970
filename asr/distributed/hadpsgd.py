"""The process groups of decentralized training (ADPSGD and H-ADPSGD).

    node            the learners of one node (a super-learner): its gradient all-reduce, on the
                    default backend (NCCL between a node's GPUs; gloo on CPU)
    node_control    the same learners on gloo, for the main thread's small messages (the token
                    counts of a step on the CPU, the checkpoint's random states), apart from the
                    all-reduces; on GPUs the token counts go over `node`'s NCCL, as the gradients
    node_claims     the same learners on gloo once more, for the claimed batch index alone: the
                    claims are made on the thread that reads batches ahead, and two threads must
                    never share a group (their collectives would interleave differently on
                    different learners)
    exchange        the learners with this learner's local index, one per node (gloo): every learner
                    of a node averages its 1/L share of the parameters with its counterpart on the
                    neighbouring node. gloo, because its receive-from-any-sender lets a passive
                    learner answer whichever neighbour comes first, and it is safe to drive from
                    the communication thread.

Plain ADPSGD is the case of one learner per node; the nodes come from torchrun's processes per
node (LOCAL_WORLD_SIZE) unless distributed.learners_per_node says otherwise, so one machine
can act as several nodes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist

from asr.distributed.context import WATCHDOG, DistributedContext
from asr.distributed.topology import Layout

log = logging.getLogger(__name__)

# The exchange threads block in gloo without a deadline of their own (gloo cannot cancel a
# receive); the main thread bounds every wait with distributed.timeout_s instead.
EXCHANGE_GROUP_TIMEOUT = timedelta(days=365)


def learners_per_node(ctx: DistributedContext, configured: int, algorithm: str) -> int:
    if algorithm == "adpsgd":
        return 1
    return configured if configured > 0 else ctx.local_world_size


@dataclass
class DecentralizedGroups:
    node: object = None  # None: one learner per node (nothing to all-reduce), or one node (the world)
    node_control: object = None
    node_claims: object = None
    exchange: object = None  # None: a single node, nobody to exchange with


def make_groups(layout: Layout) -> DecentralizedGroups:
    """Every learner must call this, with the same layout, in the same order."""
    groups = DecentralizedGroups()
    if layout.learners_per_node > 1:
        for ranks in layout.nodes:
            node = dist.new_group(ranks) if layout.num_nodes > 1 else None
            control = dist.new_group(ranks, backend="gloo")
            claims = dist.new_group(ranks, backend="gloo")
            if layout.rank in ranks:
                groups.node, groups.node_control, groups.node_claims = node, control, claims
                for group in (node, control) if node is not None else (control,):
                    WATCHDOG.follow(group)  # inside the steps (the claims wait on another thread)
    if layout.num_nodes > 1:
        for local_index in range(layout.learners_per_node):
            ranks = layout.exchange_group_ranks(local_index)
            group = dist.new_group(ranks, backend="gloo", timeout=EXCHANGE_GROUP_TIMEOUT)
            if layout.rank in ranks:
                groups.exchange = group
    return groups


def describe(layout: Layout) -> str:
    if layout.num_nodes == 1:
        return f"one node of {layout.learners_per_node} learners: no exchanges (SSGD inside the node)"
    ring = layout.ring
    partners = sorted({layout.counterpart(m) for m in ring.neighbours(layout.node)})
    share = "its parameters" if layout.learners_per_node == 1 else f"its 1/{layout.learners_per_node} of the parameters"
    return (
        f"{layout.num_nodes} nodes x {layout.learners_per_node} learners; node {layout.node} is {layout.role}, "
        f"learner {layout.rank} averages {share} with learners {partners}"
    )
