"""ADPSGD (Lian et al. 2018) and its hierarchical form H-ADPSGD, as an Updater.

Every super-learner (a node of `learners_per_node` learners; one learner for plain ADPSGD)
keeps its own weights. Each step:

    begin_step()             the node's leader, if active, starts averaging its weights with
                             the step's passive partner (exchange.py), in a communication thread
    forward, backward        on the local weights, overlapped with that exchange
    synchronize_gradients()  inside a node of several learners: weighted all-reduce (as SSGD)
    mix_weights()            w <- (w + w_partner) / 2 (active: the exchange's result; passive:
                             the averaging its server did meanwhile); the leader broadcasts it
                             to the rest of its node
    apply_update()           this node's gradient on the averaged weights

There is no global barrier per step. `consensus()` (before evaluation and checkpoints) is the
exception: it waits for the exchanges scheduled so far, then every learner takes the average
of all learners' weights and optimizer states, so a checkpoint holds one model and a resumed
run starts every learner from it. Pairwise averaging keeps the sum of the weights unchanged,
so this average is the model ADPSGD's analysis is about.

With one learner per node this is ADPSGD; with one node, no exchange happens and the node's
all-reduce makes it SSGD.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch import Tensor

from asr.distributed.context import DistributedError, collective
from asr.distributed.exchange import ActiveExchanger, PassiveServer
from asr.distributed.flat import add_to_parameters_, flat_parameters, numel, set_parameters_
from asr.distributed.ssgd import all_reduce_gradients
from asr.distributed.topology import Layout
from asr.train.updater import Updater

log = logging.getLogger(__name__)


def floating_state(optimizer: torch.optim.Optimizer) -> list[Tensor]:
    """The optimizer's floating-point state tensors in a fixed order (momenta, Adam moments)."""
    tensors = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            tensors += [state[k] for k in sorted(state) if torch.is_tensor(state[k]) and state[k].is_floating_point()]
    return tensors


def average_optimizer_state(optimizer: torch.optim.Optimizer, world_size: int, rank: int) -> None:
    tensors = floating_state(optimizer)
    shape = torch.tensor([len(tensors), sum(t.numel() for t in tensors)], dtype=torch.float64)
    low, high = shape.clone(), shape.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    if not torch.equal(low, high):
        raise DistributedError(f"learner {rank}: optimizer states differ in shape between learners ({low.tolist()} vs {high.tolist()}); cannot average them")
    if not tensors:
        return
    flat = flat_parameters(tensors).to(torch.float64)
    dist.all_reduce(flat)
    flat /= world_size
    set_parameters_(tensors, flat)


class AdpsgdUpdater(Updater):
    def __init__(self, model, optimizer, schedule, grad_clip: float, *, layout: Layout, node_group, exchange_group, timeout_s: float):
        super().__init__(model, optimizer, schedule, grad_clip)
        self.params = list(model.parameters())
        self.size = numel(self.params)
        self.layout = layout
        self.node_group = node_group  # this node's learners (None: the whole world, or alone)
        self.exchange_group = exchange_group  # gloo, the nodes' leaders
        self.timeout_s = timeout_s
        self.exchange_step = 0
        self.last_spread = 0.0
        self._exchanger: ActiveExchanger | PassiveServer | None = None
        self._begun = False
        self._consensus_at = -1

    # --- the exchanger, made on first use (after a resume has set the step) -----------------

    @property
    def exchanger(self) -> ActiveExchanger | PassiveServer | None:
        layout = self.layout
        if self._exchanger is None and layout.is_leader and layout.role != "alone":
            args = (layout.rank, layout.node, layout.ring, layout.leader_of, self.exchange_group, self.timeout_s)
            if layout.role == "active":
                self._exchanger = ActiveExchanger(*args)
            else:
                current = lambda: flat_parameters(self.params)  # noqa: E731
                self._exchanger = PassiveServer(*args, current_weights=current, size=self.size, first_step=self.exchange_step)
        return self._exchanger

    @property
    def exchanges(self) -> int:
        """Exchanges this learner took part in (its node's leader only)."""
        return self._exchanger.exchanges if self._exchanger is not None else 0

    # --- one step ------------------------------------------------------------------------------

    def begin_step(self) -> None:
        if self._begun:
            return
        self._begun = True
        exchanger = self.exchanger
        if isinstance(exchanger, ActiveExchanger):
            exchanger.start(self.exchange_step, flat_parameters(self.params))

    def synchronize_gradients(self) -> None:
        if self.layout.learners_per_node > 1:
            with collective("gradient all-reduce inside the node", self.layout.rank, self.timeout_s):
                all_reduce_gradients(self.params, self.local_weight, self.local_usable, self.node_group)

    def weights_lock(self):
        exchanger = self.exchanger
        return exchanger.lock if isinstance(exchanger, PassiveServer) else nullcontext()

    def mix_weights(self) -> None:
        if self.layout.role == "alone":
            return
        exchanger = self.exchanger
        if isinstance(exchanger, ActiveExchanger):
            delta = exchanger.finish(self.exchange_step)
        elif isinstance(exchanger, PassiveServer):
            delta = exchanger.take_pending()
        else:
            delta = None  # a node's other learners get it from the leader
        add_to_parameters_(self.params, self.share_in_node(delta))

    def share_in_node(self, delta: Tensor | None) -> Tensor:
        """The leader's averaging delta, on every learner of the node."""
        device = self.params[0].device
        if self.layout.learners_per_node == 1:
            assert delta is not None
            return delta
        buffer = delta.to(device) if delta is not None else torch.empty(self.size, device=device)
        with collective("broadcast of the averaged weights inside the node", self.layout.rank, self.timeout_s):
            dist.broadcast(buffer, src=self.layout.leader_of(self.layout.node), group=self.node_group)
        return buffer

    def end_step(self) -> None:
        self._begun = False
        self.exchange_step += 1

    def skip_batch(self) -> None:
        """No usable gradient here; the weights are still averaged, so no neighbour waits."""
        self.step(None)

    # --- agreement, checkpoints, shutdown --------------------------------------------------------

    def consensus(self) -> float:
        if self.layout.role == "alone":
            return 0.0  # one super-learner: its learners' weights are identical
        if self._consensus_at == self.exchange_step:
            return self.last_spread
        if self._begun:
            raise RuntimeError("consensus() inside a step")
        exchanger = self.exchanger
        with self.weights_lock():
            if isinstance(exchanger, PassiveServer):
                exchanger.wait_served(self.exchange_step - 1)
            if self.layout.role == "passive":
                add_to_parameters_(self.params, self.share_in_node(exchanger.take_pending() if exchanger else None))
            with collective("averaging of all learners' weights", self.layout.rank, self.timeout_s):
                self.last_spread = self.average_all()
                average_optimizer_state(self.optimizer, self.layout.world_size, self.layout.rank)
        self._consensus_at = self.exchange_step
        if self.layout.rank == 0:
            log.info("step %d: all learners averaged; their spread before was %.3g (max |w_i - mean| / |mean|)", self.exchange_step, self.last_spread)
        return self.last_spread

    def average_all(self) -> float:
        """Every learner <- the mean of all learners' weights; returns the spread before it:
        max over learners of |w_i - mean| / |mean|."""
        mine = flat_parameters(self.params)
        mean = mine.clone()
        dist.all_reduce(mean)
        mean /= self.layout.world_size
        spread = ((mine - mean).norm() / mean.norm().clamp_min(1e-12)).reshape(1).to(torch.float64)
        dist.all_reduce(spread, op=dist.ReduceOp.MAX)
        set_parameters_(self.params, mean)
        return float(spread)

    def close(self) -> None:
        exchanger = self.exchanger
        if isinstance(exchanger, ActiveExchanger):
            exchanger.close(self.exchange_step)
        elif isinstance(exchanger, PassiveServer):
            exchanger.close()
        if exchanger is not None:
            log.info("learner %d: %d ADPSGD weight exchanges", self.layout.rank, exchanger.exchanges)

    def state_dict(self) -> dict:
        return super().state_dict() | {"exchange_step": self.exchange_step}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if self._exchanger is not None:
            raise RuntimeError("load_state_dict() after the exchanges started")
        self.exchange_step = int(state.get("exchange_step", self.schedule.steps))
