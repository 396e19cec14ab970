"""Copies between a learner's parameters (on its device) and the host buffers the network uses.

On CUDA, every copy runs on a side stream, from or into pinned host memory, ordered by events
(on the CPU all of this is a plain copy and events are None):

    snapshot(params, lo, hi)   the parameters [lo, hi) as of the last change of the weights
                               into a host buffer; returns it with an event the communication
                               thread waits for before sending. The copy waits for the event
                               `weights_changed()` recorded after that change, not for the main
                               stream's tail: forward and backward work queued since does not
                               delay it.
    before_weights_change()    the main stream waits for every snapshot read so far (on the
                               GPU, without blocking the host) before the weights change;
    weights_changed()          records the event the next snapshots wait for. The updater
                               brackets every in-place change with the two (optimizer step,
                               fold, restart from the average, loading a checkpoint), under its
                               weights lock, whether or not there was anything to average.
    upload(host)               a host tensor onto the device, on the side stream; returns the
                               device tensor and an event; `ready_on_main(tensor, event)` makes
                               the main stream wait for it before use.

The order of operations in one step, on the two streams (H-ADPSGD: each learner's share):

    active   main: batch copy | [snapshot] forward, backward | wait upload(k-1 or k) | wait
                   snapshot read | fold | optimizer step | record "weights updated"
             side: wait "weights updated" of the previous step | copy snapshot k | record read
             comm thread: wait read, swap, upload (v - w) / 2 on the side stream
    passive  main: forward, backward | upload pending | wait upload | wait snapshot reads |
                   fold | optimizer step | record "weights updated"
             side (the server, any time, under the weights lock): wait the last "weights
                   updated" | copy snapshot | record read

So the main stream never waits for the network, only (on the GPU) for a memory copy, and a
snapshot never waits for compute. The stream operations go through a small seam (CudaStreams;
tests substitute a fake that logs them per stream: tests/distributed/test_gpu_order.py checks
the order above without a GPU). Nothing here has run on a GPU yet (no GPU is lent to this
project).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
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
        self.side = torch.cuda.Stream(device)

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

    def snapshot(self, params: Sequence[Tensor], lo: int, hi: int) -> tuple[Tensor, object]:
        """Parameters [lo, hi) of the flattened model as float32 on the host (a new buffer)."""
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

    def upload(self, host: Tensor) -> tuple[Tensor, object]:
        """`host` (float32, CPU) as a tensor on the device; the event marks the copy's end."""
        s = self.streams
        if s is None:
            return host, None
        pinned = s.pinned(host)
        with s.running_on(s.side, "upload"):
            out = torch.empty(pinned.shape, dtype=pinned.dtype, device=self.device)
            out.copy_(pinned, non_blocking=True)
        done = s.record(s.side, "upload done")
        return out, done

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
def _flat_slice(params: Sequence[Tensor], lo: int, hi: int) -> Tensor:
    """Elements [lo, hi) of the parameters laid end to end (only the tensors that overlap)."""
    pieces, offset = [], 0
    for p in params:
        n = p.numel()
        if offset < hi and offset + n > lo:
            pieces.append(p.detach().reshape(-1)[max(lo - offset, 0) : min(hi - offset, n)])
        offset += n
    return torch.cat(pieces) if pieces else params[0].new_zeros(0)
