"""A pytest plugin that charges each test the CPU time it and its children used, and prints a
per-directory summary at the end of the run.

Wall time on a shared machine says little about a test's cost; user+sys CPU of pytest plus the
processes it waited for (stages, torchrun and its workers) does not depend on the other load, so
this is the figure to compare before and after making a test cheaper. The children of the fork
servers (tests/warm_python/) are added from their servers' logs. Other processes nobody waits for
are missed: the stand-in SLURM's jobs (tests/recipes/fake_slurm.py), which its sbatch starts in a
session of their own and leaves, are charged only for their stages, which run on a fork server,
so tests/recipes/test_cmd_slurm.py costs a little more than it is charged.
A module- or session-scoped fixture is charged to the first test that sets it up (under
pytest-xdist: on each worker that sets it up). Under xdist the wall column adds up the workers'
times, so it exceeds the run's.
"""

from __future__ import annotations

import os
import resource
import time
from collections import defaultdict
from pathlib import PurePosixPath

import pytest

_CPU_BY_TEST: dict[str, float] = defaultdict(float)
_WALL_BY_TEST: dict[str, float] = defaultdict(float)


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + warm_cpu_seconds()


def warm_cpu_seconds() -> float:
    """What this process's fork servers (tests/warm_python/server.py) used for its stages: they are
    no children of pytest, so RUSAGE_CHILDREN misses them. tests/conftest.py reads them once more
    before it removes the servers' folder, in the teardown of the session's last test."""
    folder = os.environ.get("ASR_WARM_DIR")
    if folder and os.path.isdir(folder):  # gone after the session's last test: keep what was read
        for name in os.listdir(folder):
            if name.endswith(".cpu"):
                with open(os.path.join(folder, name)) as log:
                    _WARM_CPU[os.path.join(folder, name)] = sum(float(line.split("\t", 1)[0]) for line in log)
    return sum(_WARM_CPU.values())


_WARM_CPU: dict[str, float] = {}


_STARTED: dict[str, tuple[float, float]] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _STARTED[item.nodeid] = (_cpu_seconds(), time.monotonic())
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """The teardown report carries the test's cost (setup, call and teardown), so that under
    pytest-xdist the worker that ran it tells the controller, which prints the summary."""
    outcome = yield
    if call.when == "teardown" and item.nodeid in _STARTED:
        cpu, wall = _STARTED.pop(item.nodeid)
        report = outcome.get_result()
        cost = [("cpu_s", _cpu_seconds() - cpu), ("wall_s", time.monotonic() - wall)]
        report.user_properties = [*report.user_properties, *cost]


def pytest_runtest_logreport(report):
    if report.when != "teardown":
        return
    cost = dict(report.user_properties)
    if "cpu_s" in cost:
        _CPU_BY_TEST[report.nodeid] += cost["cpu_s"]
        _WALL_BY_TEST[report.nodeid] += cost["wall_s"]


def _directory(nodeid: str) -> str:
    path = PurePosixPath(nodeid.split("::", 1)[0])
    return str(path.parent) if len(path.parts) > 1 else str(path)


def _write_per_test(path: str) -> None:
    """ASR_TEST_CPU_LOG=<file>: one line per test, CPU and wall seconds, for before/after comparisons.
    Appended, so that both of `make test`'s pytest runs land in the file."""
    with open(path, "a") as out:
        for nodeid in sorted(_CPU_BY_TEST, key=_CPU_BY_TEST.get, reverse=True):
            out.write(f"{_CPU_BY_TEST[nodeid]:.2f}\t{_WALL_BY_TEST[nodeid]:.2f}\t{nodeid}\n")


def pytest_terminal_summary(terminalreporter):
    if not _CPU_BY_TEST or os.environ.get("PYTEST_XDIST_WORKER"):  # the controller reports for all
        return
    if os.environ.get("ASR_TEST_CPU_LOG"):
        _write_per_test(os.environ["ASR_TEST_CPU_LOG"])
    cpu, wall, count = defaultdict(float), defaultdict(float), defaultdict(int)
    for nodeid, seconds in _CPU_BY_TEST.items():
        directory = _directory(nodeid)
        cpu[directory] += seconds
        wall[directory] += _WALL_BY_TEST[nodeid]
        count[directory] += 1
    terminalreporter.section("time by directory (CPU: pytest and its children, user+sys)")
    for directory in sorted(cpu, key=cpu.get, reverse=True):
        terminalreporter.write_line(
            f"{cpu[directory]:8.1f} s CPU {wall[directory]:8.1f} s wall {count[directory]:5d} tests  {directory}"
        )
    terminalreporter.write_line(f"{sum(cpu.values()):8.1f} s CPU {sum(wall.values()):8.1f} s wall  total")
