"""Copies between a learner's parameters (on its device) and the host buffers the network uses.

On CUDA, every copy runs on a side stream, from or into pinned host memory, ordered by events
(on the CPU all of this is a plain copy and events are None). An exchange's buffers are made
once (`slot(size)`: a Slot, what is sent and what is received, on the host for the network and
on the device, where the average is computed; on the CPU they are the same tensors) and reused
at every exchange, so no step allocates a model-sized tensor:

    snapshot(params, lo, hi, into=slot, plus=pending)
                               the parameters [lo, hi) as of the last change of the weights
                               (plus the passive's pending average, added on the device) into
                               the slot, then to its host buffer; returns it with an event the
                               communication thread waits for before sending. The copy waits
                               for the event `weights_changed()` recorded after that change, not
                               for the main stream's tail: forward and backward work queued
                               since does not delay it. (Without `into`: into a new buffer.)
    difference(slot)           after the swap: the received weights onto the device and
                               (received - sent) / 2 computed there, on the side stream; returns
                               the device tensor and the event marking it done (the slot's host
                               buffer may be received into again once that event is).
    accumulate(pending, delta) the passive's server, weights lock held: pending += delta on the
                               side stream, after every change of the weights and every read of
                               `pending` on the main stream so far; `pending_on_main()` makes
                               the main stream wait for it before the fold reads `pending`, and
                               `pending_read()` marks a main-stream read outside a change.
    before_weights_change()    the main stream waits for every snapshot read so far (on the
                               GPU, without blocking the host) before the weights change;
    weights_changed()          records the event the next snapshots wait for. The updater
                               brackets every in-place change with the two (optimizer step,
                               fold, restart from the average, loading a checkpoint), under its
                               weights lock, whether or not there was anything to average.
    ready_on_main(t, event)    the main stream waits for a side-stream result (an active's
                               average) before it uses it.

The order of operations in one step, on the two streams (H-ADPSGD: each learner's share):

    active   main: batch copy | [snapshot] forward, backward | wait average k-1 or k | wait
                   snapshot read | fold | optimizer step | record "weights updated"
             side: wait "weights updated" of the previous step | copy snapshot k into slot
                   k mod 2 | record read
             comm thread: wait read, wait the slot's previous average, swap; side: upload the
                   received weights, (v - w) / 2 on the device | record "average done"
    passive  main: forward, backward | wait "pending updated" | wait snapshot reads | fold
                   pending | zero it | optimizer step | record "weights updated"
             side (the server, any time, under the weights lock): wait the last "weights
                   updated" | copy snapshot + pending | record read; (after the swap) upload,
                   (v' - v) / 2 | (lock) wait "weights updated" | pending += it | record
                   "pending updated"

A slot's buffers are reused only after what used them is done: on the device every reuse is on
the side stream behind a snapshot that waited for the last "weights updated", which comes
after every fold of an earlier average; on the host the communication thread waits for the
slot's previous "average done" before receiving into it again, and a snapshot into a slot is
taken only after that slot's previous exchange has finished.

So the main stream never waits for the network, only (on the GPU) for a memory copy, and a
snapshot never waits for compute. The stream operations go through a small seam (CudaStreams;
tests substitute a fake that logs them per stream: tests/distributed/test_gpu_order.py checks
the order above without a GPU). On a GPU this has run once, on one H200 with two and four
learners sharing it over gloo (docs/distributed.md); never across GPUs or machines.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
from torch import Tensor


class CudaStreams:
    """The seam between the staging's ordering and CUDA: the learner's main stream (the one
    current when the staging is made, where forward, backward and every weight update run),
    one side stream for the copies, and events. Tests put a fake with the same methods in its
    place, which logs every operation per stream (tests/distributed/fake_streams.py)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.main = torch.cuda.current_stream(device)
        # High priority (-1; CUDA clamps it to the device's range): the side stream's kernels,
        # (v - w) / 2 and the passive's pending sum, are what an exchange waits for, and the
        # scheduler then runs them between a step's kernels rather than behind them.
        self.side = torch.cuda.Stream(device, priority=-1)

    def record(self, stream, what: str):
        """An event marking everything queued on `stream` so far (`what`: for the fake's log)."""
        event = torch.cuda.Event()
        event.record(stream)
        return event

    def wait(self, stream, event) -> None:
        """Work queued on `stream` from now on starts after `event` (the host does not wait)."""
        stream.wait_event(event)

    @contextmanager
    def running_on(self, stream, what: str) -> Iterator[None]:
        """The block's kernels go to `stream`; the device is set too, as the communication
        threads have their own current device (cuda:0 unless set)."""
        with torch.cuda.device(self.device), torch.cuda.stream(stream):
            yield

    def host_buffer(self, size: int) -> Tensor:
        return torch.empty(size, dtype=torch.float32, pin_memory=True)

    def pinned(self, host: Tensor) -> Tensor:
        return host if host.is_pinned() else host.pin_memory()

    def keep_for(self, tensor: Tensor, stream) -> None:
        """`tensor` (made on another stream) is used on `stream`: its memory is not reused before."""
        tensor.record_stream(stream)


@dataclass
class Slot:
    """The buffers of one exchange, made once and reused: what is sent and what is received, on
    the host (pinned on CUDA) for the network, and on the device, where the average is computed
    (on the CPU the host and device tensors are the same)."""

    out: Tensor  # host: sent
    into: Tensor  # host: received
    out_dev: Tensor  # device: the weights sent (a snapshot, or a passive's w + pending)
    into_dev: Tensor  # device: the weights received, then (received - sent) / 2
    averaged: object = None  # event: the last upload from `into` is done (receive into it after)

    @classmethod
    def around(cls, host: Tensor) -> "Slot":
        """A slot for a host snapshot made elsewhere, with a new receive buffer (CPU only)."""
        received = torch.empty_like(host)
        return cls(host, received, host, received)


class Staging:
    def __init__(self, device: torch.device, streams=None):
        """`streams`: CudaStreams for a CUDA device (None on the CPU: plain copies), or a test's fake."""
        self.device = device
        self.streams = streams if streams is not None else CudaStreams(device) if device.type == "cuda" else None
        self._reads: list = []  # snapshot events the main stream must wait for
        self._lock = threading.Lock()
        # The event every snapshot waits for: the end of the last change of the weights (at first,
        # of everything queued when the staging is made: the model's copy onto the device).
        self._updated = self.streams.record(self.streams.main, "weights as built") if self.streams else None
        self._pending_ready = None  # the server's last update of the passive's pending average
        self._pending_read = None  # the main stream's last read of it outside a change of the weights

    def slot(self, size: int) -> Slot:
        """An exchange's buffers of `size` float32 each, zeros (a padded tail stays zero)."""
        s = self.streams
        if s is None:
            out, into = torch.zeros(size), torch.zeros(size)
            return Slot(out, into, out, into)
        host_out, host_in = s.host_buffer(size), s.host_buffer(size)
        host_out.zero_()
        host_in.zero_()
        return Slot(host_out, host_in, self.zeros(size), self.zeros(size))

    def zeros(self, size: int) -> Tensor:
        """A float32 buffer on the device (the passive's pending average, a gathered delta)."""
        return torch.zeros(size, dtype=torch.float32, device=self.device)

    def snapshot(
        self, params: Sequence[Tensor], lo: int, hi: int, into: Slot | None = None, plus: Tensor | None = None
    ) -> tuple[Tensor, object]:
        """Parameters [lo, hi) of the flattened model as float32 on the host, in `into`'s buffers
        (None: a new buffer), `plus` (a device tensor of the slot's size) added on the device."""
        if into is not None:
            return self._snapshot_into(params, lo, hi, into, plus)
        s = self.streams
        if s is None:
            return _flat_slice(params, lo, hi).to(torch.float32, copy=True), None
        host = s.host_buffer(hi - lo)
        with self._lock:
            s.wait(s.side, self._updated)
        with s.running_on(s.side, "snapshot reads the weights"):
            host.copy_(_flat_slice(params, lo, hi).float(), non_blocking=True)
        done = s.record(s.side, "snapshot read")
        with self._lock:
            self._reads.append(done)
        return host, done

    def _snapshot_into(self, params, lo: int, hi: int, into: Slot, plus: Tensor | None) -> tuple[Tensor, object]:
        s = self.streams
        if s is None:
            _copy_slice(params, lo, hi, into.out_dev)
            if plus is not None:
                into.out_dev.add_(plus)
            return into.out, None
        with self._lock:
            s.wait(s.side, self._updated)
        with s.running_on(s.side, "snapshot reads the weights"):
            _copy_slice(params, lo, hi, into.out_dev)
            if plus is not None:
                into.out_dev.add_(plus)
            into.out.copy_(into.out_dev, non_blocking=True)
        done = s.record(s.side, "snapshot read")
        with self._lock:
            self._reads.append(done)
        return into.out, done

    def difference(self, slot: Slot) -> tuple[Tensor, object]:
        """After a swap: (received - sent) / 2 on the device, in the slot's device buffer."""
        s = self.streams
        if s is None:
            return slot.into_dev.sub_(slot.out_dev).div_(2), None
        with s.running_on(s.side, "average: the received weights onto the device, (v - w) / 2"):
            slot.into_dev.copy_(slot.into, non_blocking=True)
            slot.into_dev.sub_(slot.out_dev).div_(2)
        slot.averaged = s.record(s.side, "average done")
        return slot.into_dev, slot.averaged

    def accumulate(self, pending: Tensor, delta: Tensor) -> None:
        """The passive's server (weights lock held): pending += delta (made by `difference`),
        after every change of the weights and every main-stream read of `pending` so far."""
        s = self.streams
        if s is None:
            pending.add_(delta)
            return
        with self._lock:
            after = [e for e in (self._updated, self._pending_read) if e is not None]
        for event in after:
            s.wait(s.side, event)
        with s.running_on(s.side, "pending += average"):
            pending.add_(delta)
        event = s.record(s.side, "pending updated")
        with self._lock:
            self._pending_ready = event

    def pending_on_main(self) -> None:
        """Main thread, weights lock held: the main stream waits for the server's last update
        of the pending average before it reads or changes it."""
        s = self.streams
        with self._lock:
            ready = self._pending_ready
        if s is not None and ready is not None:
            s.wait(s.main, ready)

    def pending_read(self) -> None:
        """Main thread, weights lock held, after reading the pending average on the main stream
        outside a change of the weights: the server's next update waits for that read."""
        s = self.streams
        if s is not None:
            event = s.record(s.main, "pending read")
            with self._lock:
                self._pending_read = event

    def before_weights_change(self) -> None:
        """Call on the main thread before changing the parameters in place: the change waits
        for every snapshot read so far."""
        s = self.streams
        if s is None:
            return
        with self._lock:
            reads, self._reads = self._reads, []
        for event in reads:
            s.wait(s.main, event)

    def weights_changed(self) -> None:
        """Call on the main thread after changing the parameters in place: later snapshots read
        them once this change is done, and wait for nothing queued after it."""
        s = self.streams
        if s is None:
            return
        event = s.record(s.main, "weights updated")
        with self._lock:
            self._updated = event

    def ready_on_main(self, tensor: Tensor, event) -> Tensor:
        """Make the main stream wait for an upload before it uses `tensor`."""
        s = self.streams
        if s is not None and event is not None:
            s.wait(s.main, event)
            s.keep_for(tensor, s.main)
        return tensor


def wait(event) -> None:
    """On the communication thread: block until a snapshot has reached the host."""
    if event is not None:
        event.synchronize()


@torch.no_grad()
def _copy_slice(params: Sequence[Tensor], lo: int, hi: int, out: Tensor) -> None:
    """Elements [lo, hi) of the parameters laid end to end into out[: hi - lo], as float32."""
    offset = 0
    for p in params:
        n = p.numel()
        if offset < hi and offset + n > lo:
            start, stop = max(lo - offset, 0), min(hi - offset, n)
            at = offset + start - lo
            out[at : at + stop - start].copy_(p.detach().reshape(-1)[start:stop])
        offset += n


@torch.no_grad()
def _flat_slice(params: Sequence[Tensor], lo: int, hi: int) -> Tensor:
    """Elements [lo, hi) of the parameters laid end to end (only the tensors that overlap)."""
    pieces, offset = [], 0
    for p in params:
        n = p.numel()
        if offset < hi and offset + n > lo:
            pieces.append(p.detach().reshape(-1)[max(lo - offset, 0) : min(hi - offset, n)])
        offset += n
    return torch.cat(pieces) if pieces else params[0].new_zeros(0)
