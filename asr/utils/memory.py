"""Memory a process keeps without using it: freed heap pages, and cached CPU kernels.

glibc's malloc keeps memory freed in the middle of its heaps (and raises its mmap threshold
after each large free, so arrays of a few MB land on the heap). A loop that allocates and frees
arrays of varying sizes then leaves holes the process keeps resident, and how much depends on
the heap's layout: the same run's peak varied by 50-90 MB between identical runs (with address
randomisation). `malloc_trim(0)` returns every free page of every arena; called between the
phases of a long computation, the peak is what the phase holds, not what earlier phases left.

PyTorch's CPU LSTM and matmul build a oneDNN primitive (a JIT kernel and its buffers) per input
shape, and oneDNN keeps the last 1,024 in a cache. Training batches have a new shape almost
every step, so the cache grew by about 4 MB a step for hundreds of steps, little of it used
again; `limit_kernel_cache` bounds it to what one step reuses across its layers.

What a process imports lives as long as the process, yet Python's garbage collector walks it at
every full collection: torch's modules are a few hundred thousand objects. `freeze_imports`,
called once the imports are done, leaves them out (gc.freeze). A process that trains imports
torch's compiler machinery too, when it makes its optimizer: `import_optimizer_machinery` does
that first, with the collector paused, so that it is frozen with the rest.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import importlib
import os
from typing import Callable

KERNEL_CACHE_VARIABLE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
# Enough for one step's primitives (per distinct layer shape, forward and backward, and the
# weights' reorders). A larger cache reuses a kernel when a batch shape recurs, up to about 8%
# of a CPU step, for megabytes per kernel: set the variable to trade memory for that.
KERNEL_CACHE_CAPACITY = 16


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none (musl, macOS, Windows)."""
    try:
        return ctypes.CDLL(None).malloc_trim  # the process's own symbols: libc is loaded already
    except (OSError, AttributeError, TypeError):
        return None


def release_freed_memory() -> bool:
    """Return the C heap's free pages to the operating system; False where that is not possible.
    Costs about 1 ms, and 45 ms when it releases a GB: call it between phases, not per chunk."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def limit_kernel_cache(capacity: int = KERNEL_CACHE_CAPACITY) -> None:
    """Bound oneDNN's primitive cache to `capacity` kernels, unless the environment sets it.
    oneDNN reads the variable when it builds its first primitive: call this at start-up."""
    os.environ.setdefault(KERNEL_CACHE_VARIABLE, str(capacity))


def freeze_imports() -> None:
    """Leave every object alive now out of the garbage collector's passes (gc.freeze).

    An entry point or a spawned worker calls it right after importing its library. torch's
    modules are a few hundred thousand objects that live as long as the process, and every full
    collection walks them all: while the first optimizer imports torch's compiler machinery, while
    the data and the model are set up, and once more at exit. Frozen, a process that imports torch
    and makes an optimizer takes 2.5 s of CPU instead of 3.2 s. Objects made afterwards (data,
    models, process groups, threads) are collected and finalized as usual.
    """
    gc.freeze()


def import_optimizer_machinery() -> None:
    """Import torch._dynamo now, with the garbage collector paused, in a process about to make
    an optimizer: constructing any torch.optim optimizer imports it (torch wraps add_param_group
    in torch._disable_dynamo), hundreds of thousands of objects that live as long as the process
    and that every collection during the import would walk. Call it before freeze_imports,
    which then leaves them out of later collections too."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        importlib.import_module("torch._dynamo")
    finally:
        if collecting:
            gc.enable()
