"""An epoch's batches handed out first come, first served (ADPSGD and H-ADPSGD).

Every node computes the same plan of batches for the epoch (asr.train.data); a node's leader
claims the next one with an atomic `add` on torchrun's rendezvous store when its node is ready
for it, and tells its node's other learners which over the node's gloo control group. A node
that steps twice as fast therefore trains twice as many batches, and nobody waits for a
straggler until the plan is used up (the epoch end).

One counter per epoch (`epoch<E>`); the store is new for every torchrun attempt, and a resumed
run re-plans what is left of the epoch, so counters never carry over between plans.
`limit` caps the claims of this run (train.max_steps: node batches over all nodes). Whether
the limit ended the run is decided from what every node knows alike (the limit, the plan's size,
the plans of this run's finished epochs), never from the index a node drew last: at a plan's end
each node draws one index past it, and those indices differ between nodes. A stop
request (preemption: any learner got SIGTERM/SIGUSR1) is a key of the same store: every
leader's next claim sees it and ends its node's plan there, so no node waits for another.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from asr.distributed.context import collective

NO_MORE = -1
STOP_KEY = "stop"


class BatchClaims:
    def __init__(
        self, store, *, is_leader: bool, leader: int, control_group, rank: int, timeout_s: float, limit: int = 0
    ):
        self.store = store
        self.is_leader = is_leader
        self.leader = leader
        self.control_group = control_group  # None: a node of one learner
        self.rank = rank
        self.timeout_s = timeout_s
        self.limit = limit
        self.epoch = 0
        self.claimed_in_run = 0  # plan sizes of this run's finished epochs
        self.limit_reached = False
        self.stop_seen = False  # a learner asked the job to stop (preemption)
        self.stop_published = False

    def start_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def end_epoch(self, plan_size: int) -> None:
        self.claimed_in_run += plan_size

    def __call__(self, plan_size: int) -> int | None:
        """The next batch of the plan for this node, or None when the plan (or the run's
        limit) is used up."""
        index = self._next_index(plan_size) if self.is_leader else NO_MORE
        index = self._share_in_node(index)
        return None if index == NO_MORE else index

    def request_stop(self) -> None:
        """Ask every node to stop claiming (called once by a learner that got the signal)."""
        if self.stop_published:
            return
        self.stop_published = True
        with collective("publishing a stop request", self.rank, self.timeout_s):
            self.store.add(STOP_KEY, 1)

    def _next_index(self, plan_size: int) -> int:
        with collective(f"claiming a batch of epoch {self.epoch + 1}", self.rank, self.timeout_s):
            if int(self.store.add(STOP_KEY, 0)) > 0:
                self.stop_seen = True
                return NO_MORE
            index = int(self.store.add(f"epoch{self.epoch}", 1)) - 1
        if index < min(plan_size, self.limit_left()):
            return index
        self.limit_reached = self.limit_left() < plan_size
        return NO_MORE

    def limit_left(self) -> float:
        """Batches the run's limit leaves for this epoch (inf: no limit)."""
        return self.limit - self.claimed_in_run if self.limit else float("inf")

    def _share_in_node(self, index: int) -> int:
        if self.control_group is None:
            return index
        value = torch.tensor([index, int(self.limit_reached), int(self.stop_seen)], dtype=torch.int64)
        with collective("sharing the claimed batch inside the node", self.rank, self.timeout_s):
            dist.broadcast(value, src=self.leader, group=self.control_group)
        self.limit_reached, self.stop_seen = bool(value[1]), bool(value[2])
        return int(value[0])


def claims_store():
    """The job's store (torchrun's rendezvous store, or init_process_group's), kept apart."""
    return dist.PrefixStore("asr/claims", dist.distributed_c10d._get_default_store())
