"""Spawned worker processes that stop with their stage.

ProcessPoolExecutor's own exit, whatever ended its block, first runs every task submitted to
its end: a stage stopped by SIGTERM (asr.utils.stop) or by an error would go on training or
extracting the rest for hours, and then keep none of it. `spawn_pool`'s exit does that only when
the block ends normally; when it raises, the tasks not started are cancelled and the workers
killed at once (they handle no signal, so SIGTERM would end them the same way; what they were
writing is atomic, asr/utils/atomic.py), and the same command goes on from what was kept.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterator


@contextlib.contextmanager
def spawn_pool(
    workers: int, initializer: Callable[..., Any] | None = None, initargs: tuple = ()
) -> Iterator[ProcessPoolExecutor]:
    """`workers` processes started by spawn (a fresh interpreter: no torch threads are forked)."""
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=initializer, initargs=initargs)
    try:
        yield pool
    except BaseException:
        stop_workers(pool)
        raise
    pool.shutdown(wait=True)


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel the tasks not started and kill the workers. The pool's own thread then finds them
    dead, fails what they were running (BrokenProcessPool) and reaps them; this waits for it."""
    processes = list((pool._processes or {}).values())  # no public handle before Python 3.14
    for process in processes:
        process.kill()
    pool.shutdown(wait=True, cancel_futures=True)
