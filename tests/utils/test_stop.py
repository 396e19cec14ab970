"""The forked pool workers of the decoding stages: blocked in C code, they must still die when
the pool is terminated, even though the stage that forked them handles SIGTERM in Python."""

import ctypes
import multiprocessing
import os
import signal
import threading
import time

import pytest

from asr.utils.stop import SIGNALS, default_signals, terminate_on_signal


def _block_in_c(marker):
    """Relock a default pthread mutex: a wait in C that no signal interrupts (as a lock taken
    over a fork), so a Python signal handler never gets to run."""
    open(marker, "w").close()
    mutex = ctypes.create_string_buffer(64)  # zeroed: PTHREAD_MUTEX_INITIALIZER
    lock = ctypes.CDLL(None).pthread_mutex_lock
    lock(mutex)
    lock(mutex)


@pytest.fixture
def stage_handlers():
    saved = {sig: signal.getsignal(sig) for sig in SIGNALS}
    terminate_on_signal()
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def terminated_within(pool, seconds: float, marker) -> bool:
    pool.map_async(_block_in_c, [str(marker)])
    for _ in range(600):  # until the worker is about to block, however loaded the machine
        if marker.exists():
            break
        time.sleep(0.05)
    time.sleep(0.2)  # from the marker into the mutex
    terminating = threading.Thread(target=pool.terminate, daemon=True)
    terminating.start()
    terminating.join(seconds)
    done = not terminating.is_alive()
    if not done:  # the control: end what the test left hanging
        for worker in pool._pool:
            os.kill(worker.pid, signal.SIGKILL)
        terminating.join(30)
    return done


def test_a_forked_worker_blocked_in_c_dies_when_its_pool_is_terminated(stage_handlers, tmp_path):
    pool = multiprocessing.get_context("fork").Pool(1, initializer=default_signals)
    assert terminated_within(pool, 20, tmp_path / "blocking")


def test_the_control_an_inherited_python_handler_keeps_it_alive(stage_handlers, tmp_path):
    """Without default_signals the worker outlives terminate(): what the test above guards."""
    pool = multiprocessing.get_context("fork").Pool(1)
    assert not terminated_within(pool, 3, tmp_path / "blocking")
