"""The benchmarks' own processes (`sys.executable -m ...`) start as the recipe tests' stages do:
forked from the suite's fork server (tests/warm_python/)."""

from __future__ import annotations

import multiprocessing.spawn  # noqa: F401  takes its workers' interpreter from sys.executable as it loads: the real one
import sys
from pathlib import Path

import pytest

STAND_IN = Path(__file__).resolve().parents[1] / "warm_python" / "python"


@pytest.fixture
def warm_processes(monkeypatch):
    """sys.executable is the stand-in `python`: a benchmark's `python -m asr.train` and
    `python -m torch.distributed.run` (learners included) run through the fork server, inside
    the benchmark's network namespaces and on its CPUs (`ip netns exec`, `taskset`) too;
    anything else runs the real interpreter."""
    monkeypatch.setenv("ASR_WARM_PYTHON", sys.executable)
    monkeypatch.setattr(sys, "executable", str(STAND_IN))
