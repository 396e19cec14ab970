"""Helpers for the distributed tests: the toy corpus, and jobs launched by torchrun."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.fixtures.processes import repo_pythonpath
from tests.fixtures.toy_corpus import toy_overrides
from tests.warm_python.client import client_command

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(**extra) -> dict:
    # unbuffered as torchrun's `python -u`
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=repo_pythonpath(), PYTHONUNBUFFERED="1", **extra)
    env.pop("WORLD_SIZE", None)
    env.pop("RANK", None)
    return env


def torchrun_command(nproc: int, module_args: list[str], *launcher: str) -> list[str]:
    """torchrun running `python -m MODULE ARGS`. Under the suite's fork servers (tests/conftest.py)
    the agent and each learner start as forked children of one (tests/warm_python/client.py):
    the learner's command is then the client's (torchrun's --no-python) in place of `python`."""
    if "ASR_WARM_DIR" not in os.environ:
        python, learner = [sys.executable], ["-m"]
    else:
        python = client_command()
        learner = ["--no-python", *python, "-u", "-m"]
    return [
        *python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        *launcher,
        *learner,
        *module_args,
    ]


def run_torchrun(
    nproc: int, module_args: list[str], *launcher: str, timeout: float = 300, cwd=None, env: dict | None = None
) -> subprocess.CompletedProcess:
    cmd = torchrun_command(nproc, module_args, *launcher)
    return subprocess.run(
        cmd, env=worker_env(**(env or {})), cwd=cwd or REPO, capture_output=True, text=True, timeout=timeout
    )


def train_overrides(root: Path, *extra: str) -> list[str]:
    """The toy experiment at a size where the multi-process runs take seconds."""
    return toy_overrides(root, ["train.threads=1", *extra])
