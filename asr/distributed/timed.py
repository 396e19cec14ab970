"""SSGD, ADPSGD (fixed or randomized ring, delay-by-one) and H-ADPSGD with virtual learners
on a clock: speeds, staleness and first-come-first-served batches, in one process.

Nodes are those of simulation.py (a learner under ADPSGD, `learners_per_node` learners under
H-ADPSGD, all of them under SSGD), with its arithmetic. Every learner has a speed (steps per
unit of time); a node's step takes as long as its slowest learner's, each step's time
multiplied by a random factor in [1 - jitter, 1 + jitter]. Events happen in time order:

    begin  a free node claims the epoch's next batch (first come first served, as
           asr/distributed/claims.py does: a node twice as fast takes twice as many); an active
           node snapshots its weights w_a and sends its partner of the round (topology.py) a
           request. The node's gradient is computed on the weights it holds now: nothing else
           changes a node's weights during its step, so it is computed at the step's end.
    serve  the passive's server takes the request (one at a time, in order of arrival) and reads
           v = w_p + pending; the swap takes `exchange_time`
    land   the swap is done: the active's delta (v - w_a) / 2 is ready and the passive's pending
           grows by (w_a - v) / 2
    end    the node's compute is done and, for an active, the exchange it applies now has
           landed (this step's; with delay_by_one the previous step's: none at the first), else
           it waits for it; the gradient, then the delta (active) or the pending (passive), then
           the update; the node begins its next step at once

At one time, ends come before lands, lands before begins, begins before serves, and equal
events in the order they were scheduled. So with equal speeds, no jitter, no exchange time and
no delay every step happens at once and this is exactly the lockstep reference
(`Simulation`, tests/distributed/lockstep.py). An epoch ends
when the plan is used up and every exchange has landed; then, as the real trainer does, actives
apply a delayed exchange, passives their pending, and the learners' average is evaluated while
every learner keeps its own weights. The next epoch starts for all nodes at once.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
from torch import Tensor, nn

from asr.distributed.simulation import (
    GradientsFn,
    LossFn,
    SimulatedNodes,
    StepResult,
    average_weights,
    exchange_deltas,
)

END, LAND, BEGIN, SERVE = 0, 1, 2, 3  # priorities of events at the same time


@dataclass(frozen=True)
class Timing:
    """How long things take, in units of one step of a learner of speed 1."""

    speeds: tuple[float, ...] = ()  # per learner; () = all 1
    jitter: float = 0.0  # each step's time x a factor drawn uniformly in [1 - jitter, 1 + jitter]
    exchange_time: float = 0.0  # one weight swap between two nodes
    seed: int = 0  # of the jitter draws

    @staticmethod
    def drawn(learners: int, spread: float, jitter: float, exchange_time: float, seed: int) -> "Timing":
        """Speeds drawn uniformly in [1 - spread, 1 + spread] from the seed."""
        rng = np.random.default_rng([seed, 1])
        speeds = tuple(float(s) for s in rng.uniform(1 - spread, 1 + spread, learners)) if spread > 0 else ()
        return Timing(speeds, jitter, exchange_time, seed)


@dataclass
class Exchange:
    active: int
    passive: int
    step: int
    mine: Tensor  # the active's weights when its step began
    delta: Tensor | None = None  # the active's (v - w_a) / 2, once served
    increment: Tensor | None = None  # the passive's (w_a - v) / 2
    landed: bool = False


@dataclass
class NodeClock:
    """What a node is doing: its step, the batch it claimed, its exchanges not yet applied."""

    steps: int = 0  # steps begun (over the whole run)
    epoch_steps: int = 0
    shards: Sequence[object] | None = None  # of the step in flight (None: none)
    result: StepResult | None = None  # its gradient, when computed with other nodes' (gradients_fn)
    compute_done: bool = False
    exchanges: deque = field(default_factory=deque)  # an active's, oldest first
    waited: float = 0.0  # time spent waiting for an exchange after its compute
    done_at: float = 0.0


@dataclass
class Server:
    """A passive node's server thread: one exchange at a time."""

    busy: bool = False
    queue: deque = field(default_factory=deque)


@dataclass
class EpochRun:
    loss: float  # summed over the epoch's usable batches
    count: int
    steps: list[int]  # per node
    time: float  # simulated time the epoch took
    waited: float  # summed over active nodes: time waiting for an exchange to land


# observer(node, step) after every step of a node (progress bars, tests)
Observer = Callable[[int, int], None]


class TimedSimulation(SimulatedNodes):
    def __init__(
        self,
        model: nn.Module,
        train_cfg,
        algorithm: str,
        learners: int,
        per_node: int = 1,
        topology: str = "ring",
        delay_by_one: bool = False,
        timing: Timing = Timing(),
        seed: int = 0,
        gradients_fn: GradientsFn | None = None,
    ):
        super().__init__(model, train_cfg, algorithm, learners, per_node, topology, seed)
        # the gradients of every step in flight at once; worth it with several nodes only
        self.gradients_fn = gradients_fn if len(self.nodes) > 1 else None
        self.ring = self.layout.ring
        self.delay_by_one = delay_by_one and len(self.nodes) > 1
        speeds = timing.speeds or (1.0,) * learners
        if len(speeds) != learners or min(speeds) <= 0:
            raise ValueError(f"{len(speeds)} speeds for {learners} learners; each must be > 0")
        self.timing = timing
        self.speeds = speeds
        self.jitter_rng = np.random.default_rng([timing.seed, 2])
        self.now = 0.0
        self.clocks = [NodeClock() for _ in self.nodes]
        self.servers = [Server() for _ in self.nodes]

    @property
    def steps(self) -> list[int]:
        return [c.steps for c in self.clocks]

    @property
    def lr(self) -> float:
        return self.nodes[0].updater.lr

    # --- one epoch ---------------------------------------------------------------------------

    def train_epoch(
        self, plan: Sequence[Sequence[object]], loss_fn: LossFn, observer: Observer | None = None
    ) -> EpochRun:
        """`plan`: the epoch's global batches, each one shard per learner; a node claims one
        global batch's shards of its learners at a time (the SSGD node: all of them)."""
        self._plan = [(t, members) for t in range(len(plan)) for members in self.layout.nodes]
        self._batches, self._claimed, self._loss_fn, self._observer = plan, 0, loss_fn, observer
        self._loss, self._count = 0.0, 0
        self._events: list = []
        self._seq = 0
        start = self.now
        for clock in self.clocks:
            clock.epoch_steps, clock.waited = 0, 0.0
        for node in range(len(self.nodes)):
            self._schedule(self.now, BEGIN, node)
        while self._events:
            self.now, _, _, kind, payload = heapq.heappop(self._events)
            {BEGIN: self._begin, SERVE: self._serve, LAND: self._land, END: self._end}[kind](payload)
        self._drain()
        return EpochRun(
            self._loss,
            self._count,
            [c.epoch_steps for c in self.clocks],
            self.now - start,
            sum(c.waited for c in self.clocks),
        )

    def end_epoch(self) -> tuple[Tensor, float]:
        """The learners' average (for evaluation) and their spread; learners keep their own weights."""
        for node in self.nodes:
            node.updater.end_epoch()
        return average_weights(self.nodes)

    # --- events --------------------------------------------------------------------------------

    def _schedule(self, time: float, kind: int, payload) -> None:
        heapq.heappush(self._events, (time, kind, self._seq, kind, payload))
        self._seq += 1

    def _begin(self, node: int) -> None:
        if self._claimed >= len(self._plan):
            return  # the plan is used up: this node waits for the epoch end
        t, members = self._plan[self._claimed]
        self._claimed += 1
        clock = self.clocks[node]
        clock.shards = [self._batches[t][i] for i in members]
        clock.result = None
        clock.compute_done = False
        if len(self.nodes) > 1 and self.ring.is_active(node):
            passive = self.ring.partner(node, clock.steps)
            exchange = Exchange(node, passive, clock.steps, self.nodes[node].snapshot())
            clock.exchanges.append(exchange)
            self._schedule(self.now, SERVE, exchange)
        clock.steps += 1
        clock.epoch_steps += 1
        self._schedule(self.now + self._step_time(self.layout.nodes[node]), END, node)

    def _step_time(self, members: list[int]) -> float:
        jitter = self.timing.jitter
        factors = self.jitter_rng.uniform(1 - jitter, 1 + jitter, len(members)) if jitter > 0 else np.ones(len(members))
        return max(f / self.speeds[i] for i, f in zip(members, factors))

    def _serve(self, exchange: Exchange) -> None:
        server = self.servers[exchange.passive]
        if server.busy:
            server.queue.append(exchange)
            return
        server.busy = True
        exchange.delta, exchange.increment = exchange_deltas(exchange.mine, self.nodes[exchange.passive].virtual())
        self._schedule(self.now + self.timing.exchange_time, LAND, exchange)

    def _land(self, exchange: Exchange) -> None:
        exchange.landed = True
        self.nodes[exchange.passive].pending.add_(exchange.increment)
        server = self.servers[exchange.passive]
        server.busy = False
        if server.queue:
            self._serve(server.queue.popleft())
        clock = self.clocks[exchange.active]
        if clock.compute_done and self._due(exchange.active) is exchange:
            clock.waited += self.now - clock.done_at
            self._schedule(self.now, END, exchange.active)

    def _due(self, node: int) -> Exchange | None:
        """The exchange an active applies at the end of its current step (None: none)."""
        exchanges = self.clocks[node].exchanges
        if not exchanges or (self.delay_by_one and len(exchanges) < 2):
            return None
        return exchanges[0]

    def _end(self, node: int) -> None:
        clock, sim_node = self.clocks[node], self.nodes[node]
        due = self._due(node)
        if due is not None and not due.landed:
            clock.compute_done, clock.done_at = True, self.now  # waits for the exchange (see _land)
            return
        if self.gradients_fn is None:
            result = sim_node.compute_gradient(clock.shards, self._loss_fn)
        else:
            if clock.result is None:
                self._compute_in_flight()
            result = clock.result
        clock.shards = None
        self._loss += result.loss
        self._count += result.count
        if due is not None:
            clock.exchanges.popleft()
            delta = due.delta
        else:
            delta = sim_node.take_pending() if len(self.nodes) > 1 and not self.ring.is_active(node) else None
        sim_node.apply(delta)
        if self._observer is not None:
            self._observer(node, clock.steps)
        self._schedule(self.now, BEGIN, node)

    def _compute_in_flight(self) -> None:
        """The gradients of every step begun and not yet computed, in one call: a node's
        weights do not change between its step's begin and end (only its own end changes
        them), so each is what the node's end would compute alone."""
        nodes = [n for n, c in enumerate(self.clocks) if c.shards is not None and c.result is None]
        results = self.gradients_fn([self.nodes[n].model for n in nodes], [self.clocks[n].shards for n in nodes])
        for n, (loss_sum, count) in zip(nodes, results):
            self.clocks[n].result = self.nodes[n].computed_gradient(loss_sum, count)

    def _drain(self) -> None:
        """The epoch end: delayed exchanges and pending averages land in the weights."""
        for node, (sim_node, clock) in enumerate(zip(self.nodes, self.clocks)):
            while clock.exchanges:
                exchange = clock.exchanges.popleft()
                assert exchange.landed, "an exchange still in flight at the epoch end"
                sim_node.add(exchange.delta)
            if len(self.nodes) > 1 and not self.ring.is_active(node):
                sim_node.add(sim_node.take_pending())
