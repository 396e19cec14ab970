"""H-ADPSGD's process groups: one per node (the super-learner's all-reduce, on the default
backend: NCCL between a node's GPUs) and one of the nodes' leaders for the ADPSGD exchanges
(gloo: its receive-from-any-sender lets a passive leader answer whichever neighbour comes
first, and it is safe to drive from the communication thread).

Plain ADPSGD is the case of one learner per node; the nodes come from torchrun's processes per
node (LOCAL_WORLD_SIZE) unless distributed.learners_per_node says otherwise, so one machine
can act as several nodes.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import torch.distributed as dist

from asr.distributed.context import DistributedContext
from asr.distributed.topology import Layout

log = logging.getLogger(__name__)

# The exchange threads block in gloo without a deadline of their own (gloo cannot cancel a
# receive); the main thread bounds every wait with distributed.timeout_s instead.
EXCHANGE_GROUP_TIMEOUT = timedelta(days=365)


def learners_per_node(ctx: DistributedContext, configured: int, algorithm: str) -> int:
    if algorithm == "adpsgd":
        return 1
    return configured if configured > 0 else ctx.local_world_size


def make_groups(layout: Layout):
    """(node group, exchange group); every learner must call this, in the same order."""
    node_group = None  # one learner per node: nothing to all-reduce; one node: the world
    if layout.learners_per_node > 1 and layout.num_nodes > 1:
        for ranks in layout.nodes:
            group = dist.new_group(ranks)
            if layout.rank in ranks:
                node_group = group
    exchange_group = None
    if layout.num_nodes > 1:
        leaders = [layout.leader_of(n) for n in range(layout.num_nodes)]
        exchange_group = dist.new_group(leaders, backend="gloo", timeout=EXCHANGE_GROUP_TIMEOUT)
    return node_group, exchange_group


def describe(layout: Layout) -> str:
    if layout.num_nodes == 1:
        return f"one node of {layout.learners_per_node} learners: no exchanges (SSGD inside the node)"
    ring = layout.ring
    partners = sorted({layout.leader_of(m) for m in ring.neighbours(layout.node)})
    return (
        f"{layout.num_nodes} nodes x {layout.learners_per_node} learners; node {layout.node} is {layout.role}, "
        f"its leader learner {layout.leader_of(layout.node)} exchanges with learners {partners}"
    )
