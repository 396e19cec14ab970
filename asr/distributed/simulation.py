"""The virtual nodes of SSGD, ADPSGD and H-ADPSGD with N learners simulated in one process.

A *node* is what steps as one: a learner under ADPSGD, `learners_per_node` learners under
H-ADPSGD, all learners under SSGD. Every node has its own model copy, optimizer and schedule;
the learners of a node hold equal weights (their gradients are all-reduced), so a node keeps
one model, and its gradient is computed on the union of its learners' shards: the real
trainer's all-reduce weighted by counts gives exactly the gradient of that union batch's mean
loss (tests/distributed/test_simulation.py checks SSGD against one learner).

The clocked simulator of the sweep (asr/distributed/timed.py) runs its nodes on a clock (speeds,
staleness, first-come-first-served batches, delay-by-one); with equal speeds it reduces to the
lockstep reference that the tests keep (tests/distributed/lockstep.py). H-ADPSGD with one
learner per node is ADPSGD, with one node SSGD.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor, nn

from asr.distributed.flat import add_to_parameters_, flat_parameters
from asr.distributed.topology import Layout, node_groups
from asr.optim.updater import Updater, build_updater

# loss_fn(model, shards) -> (summed loss, count) over the union of the learners' shards: the
# loss optimised is sum / count (as asr.train.objectives' losses).
LossFn = Callable[[nn.Module, Sequence[object]], tuple[Tensor, int]]
# gradients_fn(models, shards per model) -> (summed loss, count) per model, each model's .grad
# set to the gradient of its mean loss: several nodes' steps computed at once (asr/sweep/batched.py)
GradientsFn = Callable[[Sequence[nn.Module], Sequence[Sequence[object]]], list[tuple[Tensor, int]]]


def learners_per_node(algorithm: str, learners: int, per_node: int) -> int:
    if algorithm == "ssgd":
        return learners
    if algorithm == "adpsgd":
        return 1
    if algorithm == "hadpsgd":
        return per_node
    raise ValueError(f"unknown algorithm {algorithm!r}; choose ssgd, adpsgd or hadpsgd")


def make_layout(algorithm: str, learners: int, per_node: int = 1, topology: str = "ring", seed: int = 0) -> Layout:
    per_node = learners_per_node(algorithm, learners, per_node)
    node_groups(learners, per_node)  # a clear error if per_node does not divide the learners
    return Layout(0, learners, per_node, topology, seed)


def exchange_deltas(mine: Tensor, virtual: Tensor) -> tuple[Tensor, Tensor]:
    """(the active's delta, the passive's pending increment) of one exchange between the
    active's snapshot `mine` and the passive's w + pending, computed as exchange.py does."""
    return virtual.clone().sub_(mine).div_(2), mine.clone().sub_(virtual).div_(2)


@dataclass
class StepResult:
    loss: float  # summed over the node's usable shards
    count: int


class SimNode:
    """One node: its model, its updater and the averaging its 'server' has not applied yet."""

    def __init__(self, model: nn.Module, train_cfg, learners: int):
        self.model = model
        self.params = list(model.parameters())
        self.updater: Updater = build_updater(model, train_cfg, learners)
        # on the weights' device: a passive's pending average is added to them every step
        self.pending = torch.zeros(
            sum(p.numel() for p in self.params), dtype=torch.float32, device=self.params[0].device
        )
        self.skipped = 0
        self.steps = 0

    def snapshot(self) -> Tensor:
        return flat_parameters(self.params).float()

    def virtual(self) -> Tensor:
        """The weights a passive answers an exchange with: w + what is still pending."""
        return self.snapshot().add_(self.pending)

    def compute_gradient(self, shards: Sequence[object], loss_fn: LossFn) -> StepResult:
        """The gradient of the node's batch on its current weights (none if the loss is not finite)."""
        self.updater.optimizer.zero_grad(set_to_none=True)
        loss_sum, count = loss_fn(self.model, shards)
        if not bool(torch.isfinite(loss_sum)):
            return StepResult(0.0, 0)
        (loss_sum / max(count, 1)).backward()
        return StepResult(float(loss_sum.detach()), count)

    def computed_gradient(self, loss_sum: Tensor, count: int) -> StepResult:
        """A gradient a GradientsFn set on the model (none if the loss is not finite)."""
        if not bool(torch.isfinite(loss_sum)):
            self.updater.optimizer.zero_grad(set_to_none=True)
            return StepResult(0.0, 0)
        return StepResult(float(loss_sum.detach()), count)

    def take_pending(self) -> Tensor:
        taken, self.pending = self.pending, torch.zeros_like(self.pending)
        return taken

    def apply(self, delta: Tensor | None) -> None:
        """The end of a step: clip, add the averaging delta, then the gradient update."""
        updater = self.updater
        norm = updater.clip_gradients() if updater.has_gradients() else math.nan
        if delta is not None:
            add_to_parameters_(self.params, delta)
        if math.isfinite(norm):
            updater.apply_update()
        else:
            updater.optimizer.zero_grad(set_to_none=True)
            self.skipped += 1
        updater.schedule.step()
        self.steps += 1

    def add(self, delta: Tensor) -> None:
        """An averaging delta without a gradient step (an epoch end draining what is pending)."""
        add_to_parameters_(self.params, delta)


def build_nodes(model: nn.Module, train_cfg, layout: Layout) -> list[SimNode]:
    models = [model] + [copy.deepcopy(model) for _ in range(layout.num_nodes - 1)]
    return [SimNode(m, train_cfg, layout.world_size) for m in models]


def average_weights(nodes: Sequence[SimNode]) -> tuple[Tensor, float]:
    """The nodes' mean weights (every node has equally many learners) and their spread
    before averaging: max over nodes of |w_i - mean| / |mean|."""
    flats = torch.stack([n.snapshot() for n in nodes])
    mean = flats.mean(0)
    spread = float(((flats - mean).norm(dim=1) / mean.norm().clamp_min(1e-12)).max())
    return mean, spread


class SimulatedNodes:
    """The virtual nodes of a simulation (one model and updater per node), what the lockstep
    and the clocked simulators (asr/distributed/timed.py) have in common."""

    def __init__(
        self, model: nn.Module, train_cfg, algorithm: str, learners: int, per_node: int, topology: str, seed: int
    ):
        self.algorithm = algorithm
        self.layout = make_layout(algorithm, learners, per_node, topology, seed)
        self.nodes: list[SimNode] = build_nodes(model, train_cfg, self.layout)

    @property
    def learners(self) -> int:
        return self.layout.world_size

    @property
    def models(self) -> list[nn.Module]:
        return [n.model for n in self.nodes]

    @property
    def skipped(self) -> int:
        return sum(n.skipped for n in self.nodes)
