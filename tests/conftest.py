"""Fixtures every test package may use (the corpora themselves are in tests/fixtures/), and the
order of the files on `make test`'s pytest-xdist workers (CONTRIBUTING.md)."""

import glob
import os
import shutil
import tempfile

# Set before torch loads GNU OpenMP, which reads it once; children (stages, torchrun learners)
# inherit it. By default an OpenMP thread that finds no work spins before it sleeps: with two
# pytest-xdist workers on two cores, a process's second thread spins on a core another process
# needs. The LSTM kernel-cache script of tests/utils/test_memory.py (2 threads) took 14.8 s of
# CPU beside two busy loops, 2.3 s with PASSIVE; alone, 1.9 s either way. How long a waiting
# thread spins changes no result, only the CPU it burns.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
from filelock import FileLock  # noqa: E402

from tests.fixtures.ssgd_reference import train_ssgd_reference  # noqa: E402
from tests.fixtures.toy_corpus import make_toy_experiment  # noqa: E402
from tests.warm_python.client import placement, stop_servers  # noqa: E402

pytest_plugins = ["tests.cpu_report"]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """On an xdist worker (`make test` runs `--dist loadfile --no-loadscope-reorder`): the files
    with `slow` tests first, so that no long file starts last while the other worker has nothing
    left to do. Every worker sorts alike, as xdist requires."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        slow_files = {item.path for item in items if item.get_closest_marker("slow")}
        items.sort(key=lambda item: item.path not in slow_files)  # stable: collection order otherwise


@pytest.fixture(scope="session", autouse=True)
def warm_python_folder():
    """Where this pytest process's fork servers keep their sockets (tests/warm_python/server.py),
    for the stages of run.sh (tests/recipes/conftest.py) and torchrun's agents and learners
    (tests/distributed/conftest.py). A server starts with the first process that needs it and is
    stopped here. ASR_TEST_WARM=0 starts every process in a fresh interpreter instead."""
    here = placement()
    # A GPU machine runs its tests fresh: a server must not fork after the CUDA driver is loaded.
    if os.environ.get("ASR_TEST_WARM", "1") == "0" or not here or glob.glob("/dev/nvidia[0-9]*"):
        yield None
        return
    # short: a socket's path has at most 107 bytes, and TMPDIR may be long
    folder = tempfile.mkdtemp(prefix="asr-warm-", dir="/tmp" if os.access("/tmp", os.W_OK) else None)
    os.environ.update(ASR_WARM_DIR=folder, ASR_WARM_PLACEMENT=here)
    yield folder
    stop_servers(folder)
    from tests.cpu_report import warm_cpu_seconds  # a plugin (above): imported once pytest has it

    warm_cpu_seconds()  # the last test's stages, before their servers' logs go
    del os.environ["ASR_WARM_DIR"], os.environ["ASR_WARM_PLACEMENT"]
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def toy_corpus(tmp_path_factory):
    """The toy corpus with its tokenizer, made once per session; tests that write into it copy it."""
    root = tmp_path_factory.mktemp("toy")
    make_toy_experiment(root)
    return root


@pytest.fixture(scope="session")
def ssgd_reference(tmp_path_factory):
    """The exp dir of the uninterrupted SSGD run (tests/fixtures/ssgd_reference.py), trained once
    per session for the tests that compare an interrupted run with it; read it, never write.
    Under pytest-xdist the first worker that needs it trains it in the workers' shared temporary
    directory, on a toy corpus of its own there (the same bytes as every worker's), and a worker
    that needs it meanwhile waits on the lock: one torchrun job a session, not one a worker."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "ssgd_reference"
    root.mkdir(exist_ok=True)
    exp, done = root / "exp", root / "done"
    with FileLock(root / "lock"):
        if not done.exists():
            shutil.rmtree(root / "toy", ignore_errors=True)  # what a worker that failed left
            shutil.rmtree(exp, ignore_errors=True)
            make_toy_experiment(root / "toy")
            train_ssgd_reference(root / "toy", exp)
            done.touch()
    return exp


@pytest.fixture
def sweep_start_in_this_process(monkeypatch):
    """For a test that runs a sweep entry point in pytest's own process: its start
    (asr.sweep.run.start_process) freezes no objects of the worker, and the subnormal floats it
    flushes are not flushed any more for the tests after it."""
    import torch

    monkeypatch.setattr("asr.sweep.run.freeze_imports", lambda: None)
    yield
    torch.set_flush_denormal(False)
