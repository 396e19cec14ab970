"""ADPSGD's pairwise weight exchange, run by a communication thread on its own process group.

An *active* learner starts an exchange with its passive partner of the step (topology.py)
before its forward pass: its communication thread sends a header, then sends its weights w_a
while it receives the partner's weights v (both directions at once); the main thread, after its
backward pass, adds (v - w_a) / 2, i.e. w_a <- (w_a + v) / 2, and then applies its own gradient.
With delay_by_one it adds the delta of the exchange it started one step earlier instead, so an
exchange has a whole step to complete (adpsgd.py).
Under H-ADPSGD every learner of a node does this for its share of the parameters, with the
learner of the same local index on the partner node.

A *passive* learner runs a server thread that answers any active neighbour at any time, so it
never waits for one (a slow learner slows nobody's steps). Its weights are used by its own
forward/backward meanwhile, so they cannot be changed in place from the server; instead the
server keeps the averaging's effect as a pending delta d and answers with the weights the
learner *would* have, v = w + d, then sets d += (w_a - v) / 2. The main thread adds d to its
weights (taking it under the weights lock) before applying its own gradient. Both sides thus end
with the same (w_a + v) / 2, plus whatever gradient the passive applied meanwhile, which is
ADPSGD's update. The server holds the weights lock only to read v and to update d, never while
it sends or receives, so the passive's own steps never wait for the network.

No exchange allocates a model-sized tensor: what is sent and received lives in buffers made
once (staging.py's Slot; an active alternates two, since with delay_by_one two exchanges are in
flight, a passive has one), the snapshot is copied straight into them, (v - w) / 2 is computed in
place on the learner's device, and the passive's pending delta d lives on its device too: the
main thread folds it in place and clears it, under the weights lock (H-ADPSGD: a copy of the
share, for the node's all-gather, into one more buffer made once).

Messages (gloo, on a group of their own so they never interleave with the main thread's
collectives; tags keep the three kinds apart):

    header   int64 [sender rank, step, kind]     kind 1 = exchange, 0 = goodbye
    weights  float32 [share]                       active -> passive and passive -> active at once

Shutdown: an active learner sends each passive it may pair with a goodbye after its last
exchange (a ring neighbour; under distributed.topology=random_ring every passive, under
exponential its log2(n) hypercube neighbours); a passive
server stops after a goodbye from each active that may pair with it. So no learner is ever left
blocked in a send or receive, and the process group can be destroyed cleanly.

Waiting is bounded: an active learner waits at most `timeout_s` for its exchange, a passive one
at most `timeout_s` for an exchange in flight (at an epoch end) and for the goodbyes; beyond
that a DistributedError names the learner that stopped answering. Each of these waits is also
under the hang watchdog (context.py), which inside the training steps ends a wait far sooner
than timeout_s. The threads themselves block without a timeout (gloo cannot cancel a receive),
which is why the bounded waits are on the main thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable

import torch
import torch.distributed as dist
from torch import Tensor

from asr.distributed.context import DistributedError, collective
from asr.distributed.staging import Slot, Staging, wait

log = logging.getLogger(__name__)

HEADER_TAG, WEIGHTS_TAG, REPLY_TAG = 11, 12, 13
EXCHANGE, GOODBYE = 1, 0


def header(rank: int, step: int, kind: int) -> Tensor:
    return torch.tensor([rank, step, kind], dtype=torch.int64)


class PointToPoint:
    """Sends and receives on one gloo group (the exchange's transport)."""

    def __init__(self, group):
        self.group = group

    def send_header(self, values: Tensor, peer: int) -> None:
        dist.send(values, peer, group=self.group, tag=HEADER_TAG)

    def recv_header(self) -> Tensor:
        values = torch.zeros(3, dtype=torch.int64)
        dist.recv(values, None, group=self.group, tag=HEADER_TAG)
        return values

    def swap(self, mine: Tensor, theirs: Tensor, peer: int, active: bool) -> None:
        """Send `mine` to `peer` while receiving its tensor into `theirs`.

        The receive is posted first: gloo sends a tensor only once the peer's matching receive
        is posted, so with the send first both sides' data waited for a notice queued behind
        it and the two directions crossed the link one after the other (measured on a
        rate-limited link: 0.20 s for what takes 0.105 s with the receive first)."""
        send_tag, recv_tag = (WEIGHTS_TAG, REPLY_TAG) if active else (REPLY_TAG, WEIGHTS_TAG)
        receive = dist.irecv(theirs, peer, group=self.group, tag=recv_tag)
        works = [receive, dist.isend(mine, peer, group=self.group, tag=send_tag)]
        for work in works:
            work.wait()


class CommThread:
    """One daemon thread that runs jobs in order and hands back Futures."""

    def __init__(self, name: str):
        self.jobs: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            future, fn, args = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as err:  # handed to the main thread, which reports it
                    future.set_exception(err)

    def submit(self, fn: Callable, *args) -> Future:
        future: Future = Future()
        self.jobs.put((future, fn, args))
        return future

    def stop(self, timeout: float) -> bool:
        self.jobs.put(None)
        self.thread.join(timeout)
        return not self.thread.is_alive()


class ActiveExchanger:
    """The active side: one exchange per step with the step's partner, overlapped with compute.

    `partner_of(step)` is the learner to average with at a step; `passives` every learner it
    ever averages with (they get a goodbye at the end). Exchanges run in the order they were
    started; with delay_by_one the previous step's exchange is still in flight when the next
    one starts, so up to two are."""

    def __init__(
        self,
        rank: int,
        partner_of: Callable[[int], int],
        passives: list[int],
        transport,
        staging: Staging,
        timeout_s: float,
    ):
        self.rank = rank
        self.partner_of = partner_of
        self.passives = passives
        self.transport = transport
        self.staging = staging
        self.timeout_s = timeout_s
        self.thread = CommThread(f"adpsgd-active-{rank}")
        self.in_flight: deque[tuple[int, int, Future, Slot]] = deque()  # (step, partner, result, buffers), oldest first
        self.exchanges = 0
        self.bytes_sent = 0

    def start(self, step: int, mine: Slot | Tensor, ready) -> None:
        """Exchange `mine` (a slot holding a snapshot, complete once `ready` is; or a host
        snapshot of its own) with the step's partner."""
        slot = mine if isinstance(mine, Slot) else Slot.around(mine)
        assert all(slot is not used for *_, used in self.in_flight), "a slot is reused while its exchange is in flight"
        partner = self.partner_of(step)
        future = self.thread.submit(self._exchange, step, partner, slot, ready)
        self.in_flight.append((step, partner, future, slot))

    def oldest(self) -> int | None:
        """The step of the oldest exchange not yet finished (None: none)."""
        return self.in_flight[0][0] if self.in_flight else None

    def _exchange(self, step: int, partner: int, slot: Slot, ready) -> tuple[Tensor, object]:
        wait(ready)
        wait(slot.averaged)  # the slot's previous average has left its host buffer
        self.transport.send_header(header(self.rank, step, EXCHANGE), partner)
        self.transport.swap(slot.out, slot.into, partner, active=True)
        self.bytes_sent += slot.out.numel() * slot.out.element_size()
        return self.staging.difference(slot)

    def finish(self, step: int) -> Tensor:
        """The averaging delta (v - w_a) / 2 of the exchange started at `step` (the oldest in
        flight) on the device, waiting at most timeout_s."""
        assert self.oldest() == step, f"finish({step}) but the oldest exchange in flight is of step {self.oldest()}"
        _, partner, future, _ = self.in_flight.popleft()
        try:
            with collective(
                f"waiting for the weight exchange of step {step} with learner {partner}", self.rank, self.timeout_s
            ):
                delta, event = future.result(timeout=self.timeout_s)
        except FutureTimeout:
            raise DistributedError(
                f"learner {self.rank}: no answer from learner {partner} to the ADPSGD weight exchange of step {step} "
                f"within distributed.timeout_s={self.timeout_s:g}; it has died, hung or cannot be reached"
            ) from None
        except Exception as err:
            raise DistributedError(
                f"learner {self.rank}: ADPSGD weight exchange with learner {partner} at step {step} failed: {err}"
            ) from err
        self.exchanges += 1
        return self.staging.ready_on_main(delta, event)

    def close(self, step: int) -> None:
        """Say goodbye to every passive it may pair with, after the last exchange."""
        assert not self.in_flight, "close() with an exchange in flight: its average would be lost"
        done = self.thread.submit(self._goodbye, step)
        try:
            with collective(f"saying goodbye to learners {self.passives}", self.rank, self.timeout_s):
                done.result(timeout=self.timeout_s)
        except FutureTimeout:
            raise DistributedError(
                f"learner {self.rank}: could not say goodbye to learners {self.passives} within {self.timeout_s:g} s"
            ) from None
        self.thread.stop(self.timeout_s)

    def _goodbye(self, step: int) -> None:
        for passive in self.passives:
            self.transport.send_header(header(self.rank, step, GOODBYE), passive)


class PassiveServer:
    """The passive side: a server thread answering the active neighbours' exchanges.

    `snapshot(slot, plus)` puts this learner's share of its weights plus `plus` (the pending
    average) into the slot (Staging.snapshot) and returns its host buffer with the event that
    marks the copy complete; it is called with the weights lock held. The slot and the pending
    average (on the learner's device) are made once, by `staging`."""

    def __init__(
        self,
        rank: int,
        actives: list[int],
        transport,
        snapshot: Callable[[], tuple[Tensor, object]],
        size: int,
        timeout_s: float,
        lock: threading.Condition | None = None,
        staging: Staging | None = None,
    ):
        self.rank = rank
        self.actives = set(actives)
        self.transport = transport
        self.snapshot = snapshot
        self.timeout_s = timeout_s
        self.lock = lock or threading.Condition()  # the weights lock; also signals finished exchanges
        self.staging = staging or Staging(torch.device("cpu"))
        self.slot = self.staging.slot(size)
        self.pending = self.staging.zeros(size)
        self.in_flight = 0
        self.goodbyes: set[int] = set()
        self.error: BaseException | None = None
        self.exchanges = 0
        self.thread = threading.Thread(target=self._serve, name=f"adpsgd-passive-{rank}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            while len(self.goodbyes) < len(self.actives):
                self._serve_one()
        except BaseException as err:  # reported by the main thread at its next wait
            with self.lock:
                self.error = err
                self.lock.notify_all()

    def _serve_one(self) -> None:
        sender, step, kind = (int(v) for v in self.transport.recv_header())
        if sender not in self.actives:
            raise DistributedError(
                f"learner {self.rank}: unexpected weight exchange from learner {sender} (not an active neighbour)"
            )
        if kind == GOODBYE:
            with self.lock:
                self.goodbyes.add(sender)
                self.lock.notify_all()
            return
        slot = self.slot
        with self.lock:
            self.in_flight += 1
            virtual, ready = self.snapshot(slot, self.pending)  # the weights this learner would have: w + d
        wait(ready)
        wait(slot.averaged)  # the previous exchange's average has left the receive buffer
        self.transport.swap(virtual, slot.into, sender, active=False)
        delta, _ = self.staging.difference(slot)
        with self.lock:
            self.staging.accumulate(self.pending, delta)
            self.in_flight -= 1
            self.exchanges += 1
            self.lock.notify_all()

    def _check(self) -> None:
        if self.error is not None:
            raise DistributedError(
                f"learner {self.rank}: the ADPSGD server thread failed: {self.error}"
            ) from self.error

    def check(self) -> None:
        """Raise the server thread's error, if it failed (call with the lock held)."""
        self._check()

    def peek_pending(self, into: Tensor | None = None) -> Tensor:
        """A copy of the averaging not yet applied (call with the lock held), in `into` (a
        buffer of the same size on the device; None: a new tensor). It stays pending, so that
        the weights the server reports stay w + d, until `settle` (with the lock held, once the
        same amount has been added to the weights) takes it off."""
        self._check()
        if into is None:
            return self.pending.clone()
        self.staging.pending_on_main()
        into.copy_(self.pending)
        self.staging.pending_read()
        return into

    def settle(self, applied: Tensor) -> None:
        self.pending.sub_(applied)

    def clear(self) -> None:
        """The whole pending average has been added to the weights (lock held)."""
        self.pending.zero_()

    def wait_idle(self) -> None:
        """Wait (lock held) until no exchange is in flight: every exchange an active neighbour
        has finished is then in `pending`."""
        deadline = time.monotonic() + self.timeout_s
        with collective("waiting for the weight exchanges in flight to finish", self.rank, self.timeout_s):
            while True:
                self._check()
                if self.in_flight == 0:
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DistributedError(
                        f"learner {self.rank}: "
                        f"an ADPSGD weight exchange did not finish within distributed.timeout_s={self.timeout_s:g}; "
                        "the active neighbour died, hung or cannot be reached"
                    )
                self.lock.wait(left)

    def close(self) -> None:
        """Wait for every active neighbour's goodbye; the server thread then ends."""
        with collective(f"waiting for the goodbyes of learners {sorted(self.actives)}", self.rank, self.timeout_s):
            self.thread.join(self.timeout_s)
        if self.thread.is_alive():
            missing = sorted(self.actives - self.goodbyes)
            raise DistributedError(
                f"learner {self.rank}: "
                f"learner(s) {missing} never finished their ADPSGD exchanges (no goodbye within {self.timeout_s:g} s)"
            )
        self._check()
