"""SSGD, ADPSGD and H-ADPSGD with N virtual learners in one process.

Each virtual learner has its own model copy, optimizer and schedule, and its own shard of
every batch (the same sharding as the real learners). One step is a fixed interleaving of
what the real learners do concurrently:

    1. every learner computes its gradient on its current weights
    2. inside each node (all learners for SSGD, one learner for ADPSGD): the weighted mean
       gradient, NaN for all if any learner's loss was not finite (as ssgd.all_reduce_gradients)
    3. the step's ADPSGD exchanges between nodes, actives in ascending order
       (topology.Ring.pairs): w_a, w_p <- (w_a + w_p) / 2
    4. every learner applies its node's gradient (clipped) with its own optimizer
    5. every `consensus_every` steps (the real trainer's checkpoint interval) and at epoch
       ends: all learners take the mean of all weights and optimizer states

This is the real algorithms' arithmetic with one particular timing, in which every passive
learner answers its exchanges of step t before applying its gradient of step t: so it is
deterministic, and convergence with 16-64 learners can be studied on one CPU. Degenerate
cases coincide exactly: H-ADPSGD with one learner per node is ADPSGD, with one node SSGD.
"""

from __future__ import annotations

import copy
import math
from typing import Callable, Sequence

import torch
from torch import Tensor, nn

from asr.distributed.flat import flat_gradients, flat_parameters, set_gradients_, set_parameters_
from asr.distributed.topology import Layout, node_groups
from asr.optim.updater import Updater, build_updater, optimizer_moments

# loss_fn(model, batch) -> (summed loss, count): the loss optimised is sum / count, and the
# learners' gradients are combined weighted by count (as asr.train.objectives' losses).
LossFn = Callable[[nn.Module, object], tuple[Tensor, int]]


def learners_per_node(algorithm: str, learners: int, per_node: int) -> int:
    if algorithm == "ssgd":
        return learners
    if algorithm == "adpsgd":
        return 1
    if algorithm == "hadpsgd":
        return per_node
    raise ValueError(f"unknown algorithm {algorithm!r}; choose ssgd, adpsgd or hadpsgd")


class Simulation:
    def __init__(self, model: nn.Module, train_cfg, algorithm: str, learners: int, per_node: int = 1, consensus_every: int = 0):
        self.algorithm = algorithm
        per_node = learners_per_node(algorithm, learners, per_node)
        node_groups(learners, per_node)  # a clear error if per_node does not divide the learners
        self.layout = Layout(0, learners, per_node)
        self.models = [model] + [copy.deepcopy(model) for _ in range(learners - 1)]
        self.updaters: list[Updater] = [build_updater(m, train_cfg, learners) for m in self.models]
        self.params = [list(m.parameters()) for m in self.models]
        self.consensus_every = consensus_every
        self.steps = 0
        self.skipped = 0

    @property
    def learners(self) -> int:
        return len(self.models)

    @property
    def lr(self) -> float:
        return self.updaters[0].lr

    def step(self, batches: Sequence[object], loss_fn: LossFn) -> tuple[float, int]:
        """One step of every learner on its batch; returns (summed loss, count) over all."""
        assert len(batches) == self.learners
        total_loss, total_count = 0.0, 0
        weights, usable = [], []
        for model, updater, batch in zip(self.models, self.updaters, batches):
            updater.optimizer.zero_grad(set_to_none=True)
            loss_sum, count = loss_fn(model, batch)
            ok = bool(torch.isfinite(loss_sum))
            if ok:
                (loss_sum / max(count, 1)).backward()
                total_loss += float(loss_sum.detach())
                total_count += count
            weights.append(float(count))
            usable.append(ok)
        for node in self.layout.nodes:
            if len(node) > 1:
                self.average_gradients(node, weights, usable)
        norms = [self.clip(i) for i in range(self.learners)]
        self.mix()
        for updater, norm in zip(self.updaters, norms):
            if math.isfinite(norm):
                updater.apply_update()
            else:
                self.skipped += 1
            updater.schedule.step()
        self.steps += 1
        if self.consensus_every and self.steps % self.consensus_every == 0:
            self.consensus()
        return total_loss, total_count

    def average_gradients(self, node: list[int], weights: list[float], usable: list[bool]) -> None:
        flats = [flat_gradients(self.params[i], weights[i]) for i in node]
        total = sum(weights[i] for i in node)
        mean = torch.stack(flats).sum(0).div_(total) if total > 0 else flats[0].fill_(math.nan)
        if not all(usable[i] for i in node):
            mean.fill_(math.nan)
        for i in node:
            set_gradients_(self.params[i], mean)

    def clip(self, learner: int) -> float:
        updater = self.updaters[learner]
        if not updater.has_gradients():
            return math.nan
        norm = updater.clip_gradients()
        if not math.isfinite(norm):
            updater.optimizer.zero_grad(set_to_none=True)
        return norm

    def mix(self) -> None:
        """The step's pairwise averages between nodes (each node's learners hold equal weights)."""
        layout = self.layout
        if layout.num_nodes < 2:
            return
        nodes = layout.nodes
        weights = {n: flat_parameters(self.params[nodes[n][0]]) for n in range(layout.num_nodes)}
        for active, passive in layout.ring.pairs(self.steps):
            mean = (weights[active] + weights[passive]) / 2
            weights[active], weights[passive] = mean, mean.clone()
        for n, flat in weights.items():
            for i in nodes[n]:
                set_parameters_(self.params[i], flat)

    def consensus(self) -> float:
        """Every learner <- the mean weights and optimizer state; returns the spread before."""
        flats = torch.stack([flat_parameters(p) for p in self.params])
        mean = flats.mean(0)
        spread = float(((flats - mean).norm(dim=1) / mean.norm().clamp_min(1e-12)).max())
        for params in self.params:
            set_parameters_(params, mean)
        states = [optimizer_moments(u.optimizer) for u in self.updaters]
        for tensors in zip(*states):
            average = torch.stack([t.double() for t in tensors]).mean(0)
            for t in tensors:
                t.copy_(average)
        return spread

    def end_epoch(self) -> float:
        spread = self.consensus()
        for updater in self.updaters:
            updater.end_epoch()
        return spread
