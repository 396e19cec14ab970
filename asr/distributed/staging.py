"""Copies between a learner's parameters (on its device) and the host buffers the network uses.

On CUDA, every copy runs on a side stream, from or into pinned host memory, ordered by events:

    snapshot(params, lo, hi)   the parameters [lo, hi) as of now (what the main stream has
                               queued so far) into a host buffer; returns it with an event the
                               communication thread waits for before sending. The main stream
                               must not change the parameters before the copy has read them:
                               `before_weights_change()` makes it wait for that (on the GPU,
                               without blocking the host).
    upload(host)               a host tensor onto the device, on the side stream; returns the
                               device tensor and an event; `ready_on_main(tensor, event)` makes
                               the main stream wait for it before use.

So the main stream never waits for the network, only (on the GPU) for a memory copy. On the
CPU all of this is a plain copy and events are None. Nothing here has run on a GPU yet (no GPU
is lent to this project); the CPU path is what the tests exercise.
"""

from __future__ import annotations

import threading
from typing import Sequence

import torch
from torch import Tensor


class Staging:
    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self._reads: list = []  # snapshot events the main stream must wait for
        self._lock = threading.Lock()

    def snapshot(self, params: Sequence[Tensor], lo: int, hi: int) -> tuple[Tensor, object]:
        """Parameters [lo, hi) of the flattened model as float32 on the host (a new buffer)."""
        if not self.cuda:
            return _flat_slice(params, lo, hi).to(torch.float32, copy=True), None
        current = torch.cuda.current_stream(self.device)
        ready = torch.cuda.Event()
        ready.record(current)
        host = torch.empty(hi - lo, dtype=torch.float32, pin_memory=True)
        with torch.cuda.stream(self.stream):
            self.stream.wait_event(ready)
            host.copy_(_flat_slice(params, lo, hi).float(), non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.stream)
        with self._lock:
            self._reads.append(done)
        return host, done

    def before_weights_change(self) -> None:
        """Call on the main thread before changing the parameters in place."""
        if not self.cuda:
            return
        with self._lock:
            reads, self._reads = self._reads, []
        current = torch.cuda.current_stream(self.device)
        for event in reads:
            current.wait_event(event)

    def upload(self, host: Tensor) -> tuple[Tensor, object]:
        """`host` (float32, CPU) as a tensor on the device; the event marks the copy's end."""
        if not self.cuda:
            return host, None
        pinned = host if host.is_pinned() else host.pin_memory()
        with torch.cuda.stream(self.stream):
            out = torch.empty(pinned.shape, dtype=pinned.dtype, device=self.device)
            out.copy_(pinned, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.stream)
        return out, done

    def ready_on_main(self, tensor: Tensor, event) -> Tensor:
        """Make the main stream wait for an upload before it uses `tensor`."""
        if event is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(event)
            tensor.record_stream(current)
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
