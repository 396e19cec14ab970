"""ADPSGD (Lian et al. 2018) and its hierarchical form H-ADPSGD, as an Updater.

Every super-learner (a node of `learners_per_node` learners; one learner for plain ADPSGD)
keeps its own weights. Each step:

    begin_step()             if the node is active, every learner of it starts averaging its
                             share of the weights with its counterpart on the step's passive
                             partner node (exchange.py), in a communication thread
    forward, backward        on the local weights, overlapped with that exchange; inside a
                             node of several learners DistributedDataParallel all-reduces the
                             gradients during the backward pass (the super-learner's SSGD)
    prepare_mix()            the averaging delta (v - w) / 2 of this learner's share (active:
                             the exchange's result; passive: what its server did meanwhile),
                             gathered from the node's learners into the whole delta
    apply_mix(), update      under the weights lock: w <- w + delta, then the node's gradient

With distributed.delay_by_one an active node's prepare_mix() takes the delta of the exchange it
started at the previous step (none at its first), so each exchange overlaps a whole step and
the average lands one step late (Zhang et al., ICASSP 2020). The exchange still in flight is
applied (`drain()`) before anything that needs a learner's weights to be its whole state: the
epoch-end average, a node checkpoint (`quiesce()`), the end of training.

There is no barrier between epoch ends. At an epoch end (`average_for_epoch_end`) every
learner waits for its exchanges to land on both sides (`settle`, also before the node
checkpoints of a stop) and the learners' weights are averaged: the model ADPSGD's analysis is
about (pairwise averaging keeps the sum of the weights), which is evaluated and saved as the
epoch's checkpoint. Learners then continue from their own weights, unless
distributed.restart_from_average says otherwise.

With one learner per node this is ADPSGD; with one node, no exchange happens and the node's
all-reduce makes it SSGD.
"""

from __future__ import annotations

import logging
import math
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.distributed as dist
from torch import Tensor

from asr.distributed.context import DistributedError, collective
from asr.distributed.exchange import ActiveExchanger, PassiveServer, PointToPoint
from asr.distributed.flat import add_to_parameters_, flat_parameters, numel, set_parameters_
from asr.distributed.hadpsgd import DecentralizedGroups
from asr.distributed.ssgd import ddp_wrap, group_sums, weighted_mean_factor
from asr.distributed.staging import Staging
from asr.distributed.topology import Layout
from asr.optim.updater import Updater, optimizer_moments

log = logging.getLogger(__name__)


@dataclass
class Mix:
    delta: Tensor  # (v - w) / 2 for the whole model, on the device (a passive alone: its pending average itself)
    taken: Tensor | None = None  # a passive's share of it, still pending on its server (H-ADPSGD)
    passive: bool = False  # read from the server's pending average: wait for its last update first


@dataclass
class EpochAverage:
    """The average of all learners at an epoch end (on this learner's device)."""

    weights: Tensor  # flat
    moments: Tensor | None  # flat optimizer moments (None: no learner has any yet)
    spread: float  # max over learners of |w_i - mean| / |mean| before averaging


class AdpsgdUpdater(Updater):
    decentralized = True

    def __init__(
        self,
        model,
        optimizer,
        schedule,
        grad_clip: float,
        *,
        layout: Layout,
        groups: DecentralizedGroups,
        timeout_s: float,
        device: torch.device,
        bucket_cap_mb: float = 25.0,
        count_device: torch.device | None = None,
        restart_from_average: bool = False,
        delay_by_one: bool = False,
        scaler=None,
    ):
        super().__init__(model, optimizer, schedule, grad_clip, scaler=scaler)
        self.params = list(model.parameters())
        self.size = numel(self.params)
        self.layout = layout
        self.groups = groups
        self.timeout_s = timeout_s
        self.device = device
        self.bucket_cap_mb = bucket_cap_mb
        self.count_device = count_device or torch.device("cpu")  # where the token counts are reduced
        self.restart_from_average = restart_from_average
        self.delay_by_one = delay_by_one
        share = math.ceil(self.size / layout.learners_per_node)
        self.share_size = share
        self.share = (min(self.size, layout.local_index * share), min(self.size, (layout.local_index + 1) * share))
        self.staging = Staging(device)
        self.lock = threading.Condition()  # the weights lock (a passive's server reads the weights)
        self.exchange_step = 0
        self._begun = False
        self._slots: list = []  # an active's buffers: two, as up to two exchanges are in flight
        self._taken: Tensor | None = None  # an H-ADPSGD passive's copy of its share of the pending average
        self._gathered: Tensor | None = None  # the node's shares laid end to end
        # Made at once: a passive's server must answer from the start, even when its own node
        # has not claimed a batch yet (or none at all in an epoch) and waits at the epoch end.
        self.exchanger = self._make_exchanger()

    def _make_exchanger(self) -> ActiveExchanger | PassiveServer | None:
        layout = self.layout
        if layout.role == "alone":
            return None
        ring, transport = layout.ring, PointToPoint(self.groups.exchange)
        neighbours = [layout.counterpart(m) for m in ring.neighbours(layout.node)]
        if layout.role == "active":
            partner_of = lambda step: layout.counterpart(ring.partner(layout.node, step))  # noqa: E731
            self._slots = [self.staging.slot(self.share_size) for _ in range(2)]
            return ActiveExchanger(layout.rank, partner_of, neighbours, transport, self.staging, self.timeout_s)
        actives = [layout.counterpart(m) for m in ring.active_neighbours(layout.node)]
        snapshot = lambda into, plus: self.staging.snapshot(self.params, *self.share, into, plus)  # noqa: E731
        if layout.learners_per_node > 1:
            self._taken = self.staging.zeros(self.share_size)
        # Every buffer has the padded share's size: the counterparts' shares are equally long,
        # and a last share shorter than the others keeps a zero tail through the arithmetic.
        return PassiveServer(
            layout.rank, actives, transport, snapshot, self.share_size, self.timeout_s, self.lock, self.staging
        )

    @property
    def exchanges(self) -> int:
        return self.exchanger.exchanges if self.exchanger is not None else 0

    # --- one step ------------------------------------------------------------------------------

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        if self.layout.learners_per_node == 1:
            return model
        return ddp_wrap(model, self.device, self.groups.node, self.bucket_cap_mb)

    def count_sums(self, local: Tensor) -> tuple[list[float], list[float]]:
        if self.layout.learners_per_node == 1:
            return super().count_sums(local)
        # On a GPU over the node group's NCCL, as the gradients; on the CPU over the control group.
        on_cpu = self.count_device.type == "cpu"
        group = self.groups.node_control if on_cpu else self.groups.node
        with collective("gradient all-reduce inside the node (token counts)", self.layout.rank, self.timeout_s):
            return group_sums(local, group, self.count_device)

    def gradient_factor(self, weight: float, total: float, unusable: float) -> float | None:
        if self.layout.learners_per_node == 1:
            return super().gradient_factor(weight, total, unusable)
        return weighted_mean_factor(weight, total, unusable, self.layout.learners_per_node)

    def begin_step(self) -> None:
        if self._begun:
            return
        self._begun = True
        exchanger = self.exchanger
        if isinstance(exchanger, ActiveExchanger):
            slot = self._slots[self.exchange_step % 2]  # exchange k-2, its last user, has been folded
            _, ready = self.staging.snapshot(self.params, *self.share, into=slot)
            exchanger.start(self.exchange_step, slot, ready)

    def weights_lock(self):
        return self.lock

    @contextmanager
    def changing_weights(self) -> Iterator[None]:
        """Every in-place change of the weights happens in here: under the weights lock (a
        passive's server reads them), on the GPU after every snapshot read so far and marked
        done for the next snapshot (staging.py), whether or not the step has anything to mix."""
        with self.lock:
            self.staging.before_weights_change()
            yield
            self.staging.weights_changed()

    def prepare_mix(self) -> Mix | None:
        """This step's averaging delta for the whole model (None: nothing to average with);
        waits for the exchange and the node's learners, without the weights lock."""
        exchanger = self.exchanger
        if exchanger is None:
            return None
        if isinstance(exchanger, ActiveExchanger):
            due = exchanger.oldest()
            if due is None or (self.delay_by_one and due == self.exchange_step):
                return None  # delay_by_one: this step's exchange lands at the next step
            return Mix(self.gather_shares(exchanger.finish(due)))
        if self.layout.learners_per_node == 1:
            with self.lock:
                exchanger.check()
            return Mix(exchanger.pending, passive=True)  # folded and cleared under the lock, no copy
        with self.lock:
            taken = exchanger.peek_pending(into=self._taken)
        return Mix(self.gather_shares(taken), taken, passive=True)

    def apply_mix(self, mix: Mix | None) -> None:
        """Called with the weights lock held."""
        if mix is None:
            return
        with self.changing_weights():
            if mix.passive:
                self.staging.pending_on_main()
            add_to_parameters_(self.params, mix.delta)
            if mix.taken is not None:
                self.exchanger.settle(mix.taken)
            elif mix.passive:
                self.exchanger.clear()

    def apply_update(self, found_inf: Tensor | None = None) -> None:
        """Called with the weights lock held."""
        with self.changing_weights():
            super().apply_update(found_inf)

    def gather_shares(self, share: Tensor) -> Tensor:
        """Every node learner's share of the delta, laid end to end: the whole model's delta."""
        if self.layout.learners_per_node == 1:
            return share
        if share.numel() != self.share_size:  # a share not made in the padded buffers
            padded = torch.zeros(self.share_size, dtype=share.dtype, device=share.device)
            padded[: share.numel()] = share
            share = padded
        if self._gathered is None:  # made once: the shares are gathered straight into it
            self._gathered = self.staging.zeros(self.share_size * self.layout.learners_per_node)
        whole = self._gathered
        with collective("gathering the averaged weights inside the node", self.layout.rank, self.timeout_s):
            dist.all_gather_into_tensor(whole, share, group=self.groups.node)
        return whole[: self.size]

    def end_step(self) -> None:
        self._begun = False
        self.exchange_step += 1

    def skip_batch(self) -> None:
        """No usable gradient here; the weights are still averaged, so no neighbour waits (the
        node's counts said so to its learners: none asks again)."""
        self.step(None, factor=None)

    # --- epoch ends, checkpoints, shutdown -----------------------------------------------------

    def quiesce(self) -> None:
        """Fold what a passive's server has averaged so far into its weights, and what an
        active's delayed exchange brings (a node collective under H-ADPSGD), so that the
        weights alone are this learner's state."""
        if isinstance(self.exchanger, PassiveServer):
            mix = self.prepare_mix()
            with self.lock:
                self.apply_mix(mix)
        self.drain()

    def drain(self) -> None:
        """delay_by_one: wait for the exchange still in flight and apply its average now."""
        exchanger = self.exchanger
        if not isinstance(exchanger, ActiveExchanger):
            return
        while (due := exchanger.oldest()) is not None:
            mix = Mix(self.gather_shares(exchanger.finish(due)))
            with self.lock:
                self.apply_mix(mix)

    def gather_in_node(self, obj) -> list:
        """`obj` of every learner of this node, in local order (for the node's checkpoint)."""
        if self.layout.learners_per_node == 1:
            return [obj]
        out: list = [None] * self.layout.learners_per_node
        with collective("gathering the node's random states", self.layout.rank, self.timeout_s):
            dist.all_gather_object(out, obj, group=self.groups.node_control)
        return out

    def settle(self, what: str) -> None:
        """All learners, once each, after their last step: every exchange lands on both sides,
        so that the learners' weights together keep the sum averaging conserves (the epoch-end
        average, the node checkpoints of a stop). An active applies its exchange still in
        flight and reaches the barrier only then; past it no exchange starts, and a passive
        waits for those its server is still answering and folds them in."""
        self.drain()
        with collective(f"waiting for every learner {what}", self.layout.rank, self.timeout_s):
            dist.all_reduce(torch.zeros(1))  # a barrier on gloo's side of the group: exchanges done
        if isinstance(self.exchanger, PassiveServer):
            with self.lock:
                self.exchanger.wait_idle()
            self.quiesce()

    def average_for_epoch_end(self) -> EpochAverage:
        """All learners, once each: wait for the exchanges to land, then average."""
        rank = self.layout.rank
        self.settle("at the epoch end")
        world = self.layout.world_size
        with collective("averaging of all learners' weights", rank, self.timeout_s):
            mine = flat_parameters(self.params).float()
            mean = mine.clone()
            dist.all_reduce(mean)
            mean /= world
            spread = ((mine - mean).norm() / mean.norm().clamp_min(1e-12)).reshape(1)
            dist.all_reduce(spread, op=dist.ReduceOp.MAX)
            moments = self._mean_moments(world)
        average = EpochAverage(mean, moments, float(spread))
        if self.restart_from_average:
            self._restart_from(average)
        return average

    def _mean_moments(self, world: int) -> Tensor | None:
        tensors = optimizer_moments(self.optimizer)
        sizes = torch.tensor([float(sum(t.numel() for t in tensors))] * 2, dtype=torch.float64)
        sizes[1] = -sizes[1]
        dist.all_reduce(sizes, op=dist.ReduceOp.MAX)  # max and -min: every learner the same?
        if sizes[0] != -sizes[1]:
            raise DistributedError(
                f"learner {self.layout.rank}: optimizer states differ in size between learners; cannot average them"
            )
        if not tensors:
            return None
        flat = flat_parameters(tensors).float()
        dist.all_reduce(flat)
        return flat / world

    def _restart_from(self, average: EpochAverage) -> None:
        with self.changing_weights():
            set_parameters_(self.params, average.weights)
            if average.moments is not None:
                set_parameters_(optimizer_moments(self.optimizer), average.moments)
        with collective("restarting every learner from the average", self.layout.rank, self.timeout_s):
            dist.all_reduce(torch.zeros(1))  # nobody exchanges before every learner holds the average

    def close(self) -> None:
        exchanger = self.exchanger
        if isinstance(exchanger, ActiveExchanger):
            self.drain()
            exchanger.close(self.exchange_step)
        elif isinstance(exchanger, PassiveServer):
            exchanger.close()
        if exchanger is not None:
            log.info("learner %d: %d ADPSGD weight exchanges", self.layout.rank, exchanger.exchanges)

    def state_dict(self) -> dict:
        return super().state_dict() | {"exchange_step": self.exchange_step}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.exchange_step = int(state.get("exchange_step", self.schedule.steps))
