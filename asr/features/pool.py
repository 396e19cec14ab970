"""The worker pool of the feature recipes: work split into parts (recordings, speakers), each
part a task run in a spawned process (or in this one when there is one part), with one
progress bar over the items all of them do.

Inside `shared_workers(jobs)` (the features stage's whole run) every split step uses one pool
of `jobs` workers: a recipe splits several steps (statistics, then each set's extraction), and
a worker spends seconds importing torch before its first part. Outside it, each step starts
workers of its own.

Workers run with one torch thread and one BLAS thread: the parts are the parallelism, and
threads of their own would oversubscribe the cores."""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import queue as queue_module
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterator

import torch
from tqdm import tqdm

from asr.utils.memory import freeze_imports
from asr.utils.pool import spawn_pool
from asr.utils.threads import one_blas_thread_in_children, torch_threads

_progress_queue: Any = None  # in a worker: where it counts the items it has done
_shared: tuple[ProcessPoolExecutor, Any] | None = None  # in the stage: shared_workers' pool and queue


def _init_worker(progress_queue: Any, work_module: str | None) -> None:
    global _progress_queue
    if work_module:
        importlib.import_module(work_module)  # the recipe's module and its libraries: lifetime objects
    freeze_imports()
    _progress_queue = progress_queue
    torch.set_num_threads(1)  # the jobs are the parallelism; threads would oversubscribe the cores


def _run_part_in_worker(work: Callable[[Any, Callable[[], None]], Any], task: Any) -> Any:
    return work(task, lambda: _progress_queue.put(1))


@contextlib.contextmanager
def shared_workers(jobs: int) -> Iterator[None]:
    """Every `run_parts` of more than one part inside the block runs on one pool of `jobs`
    spawned workers, started as parts first need them and stopped with the block (at once when
    it raises, as spawn_pool stops its workers)."""
    global _shared
    if jobs <= 1 or _shared is not None:
        yield
        return
    progress = multiprocessing.get_context("spawn").Queue()
    with spawn_pool(jobs, initializer=_init_worker, initargs=(progress, None)) as pool:
        _shared = (pool, progress)
        try:
            yield
        finally:
            _shared = None


def run_parts(
    tasks: list, desc: str, total: int, work: Callable[[Any, Callable[[], None]], Any], unit: str = "rec"
) -> list:
    """`work(task, on_item_done)` for every task (in spawned worker processes when more than
    one), with a progress bar of `total` items; results in task order."""
    with tqdm(total=total, desc=desc, unit=unit, mininterval=2.0, disable=None) as bar:
        if len(tasks) == 1:
            return [work(tasks[0], lambda: bar.update(1))]
        # spawn, not fork: forking a process whose torch thread pools are running can hang.
        with contextlib.ExitStack() as stack:
            stack.enter_context(one_blas_thread_in_children())  # for the workers started meanwhile
            if _shared is not None:
                pool, progress = _shared
                drain(progress)  # a count an earlier step's last worker sent after its result
            else:
                progress = multiprocessing.get_context("spawn").Queue()
                pool = stack.enter_context(
                    spawn_pool(len(tasks), initializer=_init_worker, initargs=(progress, work.__module__))
                )
            futures = [pool.submit(_run_part_in_worker, work, task) for task in tasks]
            while not all(f.done() for f in futures):
                try:
                    bar.update(progress.get(timeout=0.5))
                except queue_module.Empty:
                    pass
            bar.update(drain(progress))
            return [f.result() for f in futures]


def drain(progress: Any) -> int:
    """The counts waiting in `progress`, taken out and added up."""
    done = 0
    with contextlib.suppress(queue_module.Empty):
        while True:
            done += progress.get_nowait()
    return done


def single_thread() -> contextlib.AbstractContextManager:
    """One torch thread for per-speaker work: its operations are small, and a second thread
    only synchronises (and spins when the machine is busy). Parallelism is across speakers."""
    return torch_threads(1)
