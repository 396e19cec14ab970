"""asr.utils.pool: a block that raises ends its workers at once; one that ends normally gets
every result. ProcessPoolExecutor alone would run every submitted task first (the control)."""

from __future__ import annotations

import multiprocessing
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import pytest

from asr.utils.pool import spawn_pool

TASK_S = 30.0  # far longer than the test waits


def sleep_then_return(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


class Stop(BaseException):
    """As asr.utils.stop.Terminated: a BaseException, raised by a signal handler."""


def wait_until_running(futures, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(f.running() for f in futures[:2]):
        assert time.monotonic() < deadline, "the workers never started their tasks"
        time.sleep(0.05)


def test_a_block_that_raises_cancels_what_has_not_started_and_ends_the_workers():
    with pytest.raises(Stop):
        with spawn_pool(2) as pool:
            futures = [pool.submit(sleep_then_return, TASK_S) for _ in range(5)]
            wait_until_running(futures)
            workers = list(pool._processes.values())
            begin = time.monotonic()
            raise Stop
    assert time.monotonic() - begin < TASK_S / 2  # not the 30 s the running tasks take
    assert [worker.exitcode for worker in workers] == [-signal.SIGKILL] * 2
    # the pool hands a worker one task more than it runs: that one fails with the workers
    assert all(f.cancelled() or isinstance(f.exception(), BrokenProcessPool) for f in futures)
    assert sum(f.cancelled() for f in futures) >= 2


def test_a_block_that_ends_normally_gets_every_result():
    with spawn_pool(2) as pool:
        futures = [pool.submit(sleep_then_return, 0.01 * i) for i in range(4)]
    assert [f.result() for f in futures] == [0.0, 0.01, 0.02, 0.03]


def test_the_control_the_executors_own_exit_runs_every_submitted_task_first():
    """Why spawn_pool exists: without it, a raise in the block waits until all 4 tasks have run."""
    with pytest.raises(Stop):
        with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(sleep_then_return, 0.5) for _ in range(4)]
            raise Stop
    assert [f.result() for f in futures] == [0.5] * 4
