"""Thread counts: torch's, set for a block and put back after it, and child processes whose
numpy BLAS runs one thread (where work is split over processes, the processes are the
parallelism: the feature recipes' pools, the GMM stages' jobs)."""

from __future__ import annotations

import contextlib
import os

BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@contextlib.contextmanager
def one_blas_thread_in_children():
    """Worker processes spawned meanwhile load numpy's BLAS with one thread: the jobs are the
    parallelism, and BLAS threads of their own spin on a busy machine (a 170 x 280 by 280 x 40
    product took 7 ms with numpy's default threads on 2 loaded cores, 0.7 ms with one)."""
    saved = {name: os.environ.get(name) for name in BLAS_THREAD_VARIABLES}
    os.environ.update({name: "1" for name in BLAS_THREAD_VARIABLES})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def torch_threads(count: int):
    """torch computes on `count` threads inside the block and on as many as before after it: a
    stage called in a process that goes on (a notebook, a test, a benchmark) leaves the count
    as it found it."""
    import torch  # here, not above: the GMM stages' jobs import this module and never torch

    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
