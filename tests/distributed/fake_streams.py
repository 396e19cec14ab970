"""A stand-in for the staging's CUDA streams (asr.distributed.staging.CudaStreams) on the CPU.

Every operation is appended, in the order the host issues it, to the queue of the stream it
goes to: kernels (with what they do), event records and waits. Vector clocks then say which
operations a GPU would run in a guaranteed order, so a test can check the staging's ordering
without a GPU:

    weight write W issued before snapshot read R   W must happen before R (R sees W)
    snapshot read R issued before weight write W   R must happen before W (W waits for the read)
    compute queued after the last weight write     R must not wait for it (the snapshot waits for
    and before a snapshot read R                   the weights, not the stream's tail)

Kernels are named by the staging itself (`running_on`) and by the test, which logs the main
stream's work (the batch's copy, forward, backward) and the weight writes (optimizer step,
fold) from outside the code under test.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

MAIN, SIDE = "main", "side"
WRITES = ("optimizer.step", "fold", "set weights")  # kernels that change the weights
SNAPSHOT = "snapshot"  # side-stream kernels that read them start with this


@dataclass
class Op:
    host: int  # position in the host's issue order
    stream: str
    what: str
    clock: dict[str, int] = field(default_factory=dict)

    @property
    def writes_weights(self) -> bool:
        return self.what in WRITES

    @property
    def reads_weights(self) -> bool:
        return self.what.startswith(SNAPSHOT)

    def __str__(self) -> str:
        return f"#{self.host} {self.stream}: {self.what}"


@dataclass
class FakeEvent:
    what: str
    clock: dict[str, int]

    def synchronize(self) -> None:
        """The host waits: nothing to wait for here, every operation has already "run"."""


class FakeStreams:
    def __init__(self):
        self.main, self.side = MAIN, SIDE
        self.ops: list[Op] = []
        self.log: list[str] = []  # every call, in order, for a failure's message
        self.clocks: dict[str, dict[str, int]] = {MAIN: {}, SIDE: {}}
        self.lock = threading.Lock()

    def kernel(self, stream: str, what: str) -> None:
        with self.lock:
            clock = self.clocks[stream]
            clock[stream] = clock.get(stream, 0) + 1
            self.ops.append(Op(len(self.log), stream, what, dict(clock)))
            self.log.append(f"{stream}: {what}")

    def record(self, stream: str, what: str) -> FakeEvent:
        with self.lock:
            self.log.append(f"{stream}: record {what}")
            return FakeEvent(what, dict(self.clocks[stream]))

    def wait(self, stream: str, event: FakeEvent) -> None:
        assert isinstance(event, FakeEvent), f"{stream} waits for {event!r}, not an event"
        with self.lock:
            self.log.append(f"{stream}: wait for {event.what}")
            clock = self.clocks[stream]
            for s, n in event.clock.items():
                clock[s] = max(clock.get(s, 0), n)

    @contextmanager
    def running_on(self, stream: str, what: str):
        self.kernel(stream, what)
        yield

    def host_buffer(self, size: int) -> torch.Tensor:
        return torch.empty(size, dtype=torch.float32)

    def pinned(self, host: torch.Tensor) -> torch.Tensor:
        return host

    def keep_for(self, tensor: torch.Tensor, stream: str) -> None:
        pass

    @staticmethod
    def happens_before(a: Op, b: Op) -> bool:
        return a is not b and a.clock[a.stream] <= b.clock.get(a.stream, 0)

    def hazards(self) -> list[str]:
        """Every way the logged order would let a GPU read or write the weights wrongly."""
        found = []
        reads = [op for op in self.ops if op.reads_weights]
        writes = [op for op in self.ops if op.writes_weights]
        for read in reads:
            for write in writes:
                first, then = (write, read) if write.host < read.host else (read, write)
                if not self.happens_before(first, then):
                    found.append(f"{then} is not ordered after {first}")
            last_write = max((w.host for w in writes if w.host < read.host), default=-1)
            for op in self.ops:
                queued = op.stream == MAIN and not op.writes_weights and last_write < op.host < read.host
                if queued and self.happens_before(op, read):
                    found.append(f"{read} waits for {op}, queued after the last weight change")
        return found

    def order_hazards(self, readers: tuple[str, ...], writers: tuple[str, ...]) -> list[str]:
        """For another buffer than the weights (a passive's pending average): every kernel named
        in `writers` and every one named in `readers` run in the order the host issued them."""
        found = []
        for write in (op for op in self.ops if op.what in writers):
            for other in (op for op in self.ops if op.what in readers + writers and op is not write):
                first, then = (write, other) if write.host < other.host else (other, write)
                if not self.happens_before(first, then):
                    found.append(f"{then} is not ordered after {first}")
        return found

    def report(self) -> str:
        return "\n".join(self.hazards()) + "\n--- operations, in the host's order:\n" + "\n".join(self.log)
