"""ADPSGD's pairwise weight exchange, run by a communication thread on its own process group.

An *active* learner starts an exchange with its passive partner of the step (topology.Ring)
before its forward pass: its communication thread sends a header and its weights w_a, and
receives the partner's weights back; the main thread, after its backward pass, adds
(w_p - w_a) / 2, i.e. w_a <- (w_a + w_p) / 2, and then applies its own gradient.

A *passive* learner runs a server thread that answers any active neighbour at any time, so it
never waits for one (straggler tolerance: a slow learner slows nobody's steps). Its weights are
used by its own forward/backward meanwhile, so they cannot be changed in place from the
server; instead the server keeps the averaging's effect as a pending delta d and answers with
the weights the learner *would* have, v = w + d, then sets d += (w_a - v) / 2. The main thread
adds d to its weights before applying its own gradient. Both sides thus end with the same
(w_a + v) / 2, and each exchange is atomic: the server holds the weights lock, which the main
thread also holds while it changes the weights.

Messages (gloo, on a group of their own so they never interleave with the main thread's
collectives; tags keep the three kinds apart):

    header   int64 [sender rank, step, kind]     kind 1 = exchange, 0 = goodbye
    weights  float32 [P]                           active -> passive, then passive -> active

Shutdown: an active learner sends each passive neighbour a goodbye after its last exchange; a
passive server stops after a goodbye from each active neighbour. So no learner is ever left
blocked in a send or receive, and the process group can be destroyed cleanly.

Waiting is bounded: an active learner waits at most `timeout_s` for its exchange, a passive
one at most `timeout_s` for the exchanges a checkpoint needs and for the goodbyes; beyond that
a DistributedError names the learner that stopped answering. The threads themselves block
without a timeout (gloo cannot cancel a receive), which is why the bounded waits are on the
main thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable

import torch
import torch.distributed as dist
from torch import Tensor

from asr.distributed.context import DistributedError
from asr.distributed.topology import Ring

log = logging.getLogger(__name__)

HEADER_TAG, WEIGHTS_TAG, REPLY_TAG = 11, 12, 13
EXCHANGE, GOODBYE = 1, 0


def header(rank: int, step: int, kind: int) -> Tensor:
    return torch.tensor([rank, step, kind], dtype=torch.int64)


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
    """The active side: one exchange per step with the step's partner, overlapped with compute."""

    def __init__(self, rank: int, member: int, ring: Ring, leader_of: Callable[[int], int], group, timeout_s: float):
        self.rank = rank
        self.member = member
        self.ring = ring
        self.leader_of = leader_of
        self.group = group
        self.timeout_s = timeout_s
        self.thread = CommThread(f"adpsgd-active-{rank}")
        self.future: Future | None = None
        self.partner = -1
        self.exchanges = 0
        self.bytes_sent = 0

    def start(self, step: int, weights: Tensor) -> None:
        self.partner = self.leader_of(self.ring.partner(self.member, step))
        self.future = self.thread.submit(self._exchange, step, self.partner, weights.detach().to("cpu", torch.float32))

    def _exchange(self, step: int, partner: int, mine: Tensor) -> Tensor:
        dist.send(header(self.rank, step, EXCHANGE), partner, group=self.group, tag=HEADER_TAG)
        dist.send(mine, partner, group=self.group, tag=WEIGHTS_TAG)
        theirs = torch.empty_like(mine)
        dist.recv(theirs, partner, group=self.group, tag=REPLY_TAG)
        self.bytes_sent += mine.numel() * mine.element_size()
        return theirs.sub_(mine).div_(2)

    def finish(self, step: int) -> Tensor:
        """The step's averaging delta (w_p - w_a) / 2, waiting at most timeout_s for it."""
        assert self.future is not None, "finish() without start()"
        future, self.future = self.future, None
        try:
            delta = future.result(timeout=self.timeout_s)
        except FutureTimeout:
            raise DistributedError(
                f"learner {self.rank}: no answer from learner {self.partner} to the ADPSGD weight exchange of step {step} "
                f"within distributed.timeout_s={self.timeout_s:g}; it has died, hung or cannot be reached"
            ) from None
        except Exception as err:
            raise DistributedError(f"learner {self.rank}: ADPSGD weight exchange with learner {self.partner} at step {step} failed: {err}") from err
        self.exchanges += 1
        return delta

    def close(self, step: int) -> None:
        """Say goodbye to every passive neighbour, after the last exchange."""
        passives = [self.leader_of(m) for m in self.ring.neighbours(self.member)]
        done = self.thread.submit(self._goodbye, step, passives)
        try:
            done.result(timeout=self.timeout_s)
        except FutureTimeout:
            raise DistributedError(f"learner {self.rank}: could not say goodbye to learners {passives} within {self.timeout_s:g} s") from None
        self.thread.stop(self.timeout_s)

    def _goodbye(self, step: int, passives: list[int]) -> None:
        for passive in passives:
            dist.send(header(self.rank, step, GOODBYE), passive, group=self.group, tag=HEADER_TAG)


class PassiveServer:
    """The passive side: a server thread answering the active neighbours' exchanges."""

    def __init__(self, rank: int, member: int, ring: Ring, leader_of: Callable[[int], int], group, timeout_s: float,
                 current_weights: Callable[[], Tensor], size: int, first_step: int):
        self.rank = rank
        self.member = member
        self.ring = ring
        self.group = group
        self.timeout_s = timeout_s
        self.current_weights = current_weights
        self.actives = {leader_of(m): m for m in ring.active_neighbours(member)}
        self.lock = threading.Condition()  # the weights lock; also signals served exchanges
        self.pending = torch.zeros(size, dtype=torch.float32)
        self.served_through = dict.fromkeys(self.actives, first_step - 1)
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
        head = torch.zeros(3, dtype=torch.int64)
        dist.recv(head, None, group=self.group, tag=HEADER_TAG)
        sender, step, kind = (int(v) for v in head)
        if sender not in self.actives:
            raise DistributedError(f"learner {self.rank}: unexpected weight exchange from learner {sender} (not an active neighbour)")
        if kind == GOODBYE:
            with self.lock:
                self.goodbyes.add(sender)
                self.lock.notify_all()
            return
        theirs = torch.empty_like(self.pending)
        dist.recv(theirs, sender, group=self.group, tag=WEIGHTS_TAG)
        with self.lock:
            virtual = self.current_weights().to("cpu", torch.float32).add_(self.pending)
            dist.send(virtual, sender, group=self.group, tag=REPLY_TAG)
            self.pending.add_(theirs.sub_(virtual).div_(2))
            self.served_through[sender] = step
            self.exchanges += 1
            self.lock.notify_all()

    def _check(self) -> None:
        if self.error is not None:
            raise DistributedError(f"learner {self.rank}: the ADPSGD server thread failed: {self.error}") from self.error

    def take_pending(self) -> Tensor:
        """The averaging not yet applied (call with the lock held); resets it."""
        self._check()
        delta, self.pending = self.pending, torch.zeros_like(self.pending)
        return delta

    def wait_served(self, through_step: int) -> None:
        """Wait (lock held) until every exchange scheduled up to `through_step` was answered."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            self._check()
            missing = [
                rank for rank, member in self.actives.items()
                if self.served_through[rank] < self.ring.last_request(member, self.member, through_step)
            ]
            if not missing:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise DistributedError(
                    f"learner {self.rank}: learner(s) {missing} did not start their ADPSGD weight exchanges up to step "
                    f"{through_step} within distributed.timeout_s={self.timeout_s:g}; they have died, hung or cannot be reached"
                )
            self.lock.wait(left)

    def close(self) -> None:
        """Wait for every active neighbour's goodbye; the server thread then ends."""
        self.thread.join(self.timeout_s)
        if self.thread.is_alive():
            missing = sorted(set(self.actives) - self.goodbyes)
            raise DistributedError(f"learner {self.rank}: learner(s) {missing} never finished their ADPSGD exchanges (no goodbye within {self.timeout_s:g} s)")
        self._check()
