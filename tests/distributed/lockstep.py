"""The lockstep simulation of SSGD, ADPSGD and H-ADPSGD over the nodes of
asr/distributed/simulation.py: the reference the tests hold one learner and the clocked
simulator to (only tests use it, so it lives here).

`Simulation` is the synchronous reference: one step is a fixed interleaving of what the real
learners do concurrently,

    1. every node computes its gradient on its current weights
    2. the step's exchanges between nodes (topology.py), actives in ascending order, with the
       real exchange's arithmetic (exchange.py): the active gets (v - w_a) / 2, the passive
       adds (w_a - v) / 2 to its pending delta, where v = w_p + pending
    3. every node adds its delta (active) or pending (passive) to its weights, then applies
       its gradient (clipped; a non-finite norm skips the update, the average still lands)

and the epoch end averages all nodes' weights for evaluation only: learners go on from their
own weights, as the real trainer does. asr/distributed/timed.py runs the same arithmetic on a
clock (speeds, staleness, first-come-first-served batches, delay-by-one) and reduces to this
one with equal speeds. H-ADPSGD with one learner per node is ADPSGD, with one node SSGD.
"""

from __future__ import annotations

from typing import Sequence

from torch import Tensor, nn

from asr.distributed.simulation import LossFn, SimulatedNodes, average_weights, exchange_deltas


class Simulation(SimulatedNodes):
    def __init__(
        self,
        model: nn.Module,
        train_cfg,
        algorithm: str,
        learners: int,
        per_node: int = 1,
        topology: str = "ring",
        seed: int = 0,
    ):
        super().__init__(model, train_cfg, algorithm, learners, per_node, topology, seed)
        self.steps = 0

    @property
    def lr(self) -> float:
        return self.nodes[0].updater.lr

    def step(self, batches: Sequence[object], loss_fn: LossFn) -> tuple[float, int]:
        """One step of every learner on its shard; returns (summed loss, count) over all."""
        assert len(batches) == self.learners
        results = [
            node.compute_gradient([batches[i] for i in members], loss_fn)
            for node, members in zip(self.nodes, self.layout.nodes)
        ]
        deltas = self.mix()
        for node, delta in zip(self.nodes, deltas):
            node.apply(delta)
        self.steps += 1
        return sum(r.loss for r in results), sum(r.count for r in results)

    def mix(self) -> list[Tensor | None]:
        """The step's exchanges: each node's averaging delta (None: no exchange this step)."""
        deltas: list[Tensor | None] = [None] * len(self.nodes)
        if len(self.nodes) < 2:
            return deltas
        for active, passive in self.layout.ring.pairs(self.steps):
            a, p = self.nodes[active], self.nodes[passive]
            deltas[active], increment = exchange_deltas(a.snapshot(), p.virtual())
            p.pending.add_(increment)
        for i, node in enumerate(self.nodes):
            if not self.layout.ring.is_active(i):
                deltas[i] = node.take_pending()
        return deltas

    def end_epoch(self) -> tuple[Tensor, float]:
        """The learners' average (for evaluation) and their spread; learners keep their own weights."""
        for node in self.nodes:
            node.updater.end_epoch()
        return average_weights(self.nodes)
