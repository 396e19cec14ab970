"""Logging set-up shared by every stage: one format, a console handler and a file per stage."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

FORMAT = "%(asctime)s %(levelname)s [%(name)s] %(message)s"
DATEFMT = "%Y-%m-%d %H:%M:%S"


def rank() -> int:
    """Global rank under torchrun (0 when not distributed)."""
    return int(os.environ.get("RANK", "0"))


def log_to_stderr() -> None:
    """For a tool that is no stage (a benchmark, a cluster task): INFO lines on stderr in the
    stages' format, unless logging is set up already (a test calling its main keeps its own
    handlers and levels, where setup_logging would replace them)."""
    logging.basicConfig(level=logging.INFO, format=FORMAT, datefmt=DATEFMT)


def setup_logging(stage: str, log_dir: str | os.PathLike | None = None, level: int = logging.INFO) -> logging.Logger:
    """Console logging on every rank (rank-tagged when distributed); a file on rank 0 only."""
    root = logging.getLogger()
    root.setLevel(level)
    for handler in list(root.handlers):
        root.removeHandler(handler)
    fmt = FORMAT
    if "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1:
        fmt = FORMAT.replace("[%(name)s]", f"[rank{rank()} %(name)s]")
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter(fmt, DATEFMT))
    root.addHandler(console)
    if log_dir is not None and rank() == 0:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        file_handler = logging.FileHandler(Path(log_dir) / f"{stage}.log")
        file_handler.setFormatter(logging.Formatter(fmt, DATEFMT))
        root.addHandler(file_handler)
    return logging.getLogger(f"asr.{stage}")
