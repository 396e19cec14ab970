"""What a benchmark writes at its end: its report as JSON, with the options it ran with and the
machine it ran on, and a PNG drawn from the report, each written atomically into `--out`."""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
from collections.abc import Callable
from pathlib import Path

from asr.utils.atomic import write_text

log = logging.getLogger(__name__)


def settings(args: argparse.Namespace) -> dict:
    """The command line's options as JSON holds them (paths as strings)."""
    return {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()}


def machine(**extra) -> dict:
    """Where the figures were measured: the core count, the OS and Python, and `extra`."""
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()} | extra


def write_json(report: dict, path: Path) -> None:
    write_text(path, json.dumps(report, indent=1) + "\n")


def write_report(report: dict, out: Path, name: str, plot: Callable[[dict, Path], None]) -> tuple[Path, Path]:
    """`out/NAME.json` and `out/NAME.png` (drawn by `plot(report, path)`); returns both paths."""
    json_path, png = out / f"{name}.json", out / f"{name}.png"
    write_json(report, json_path)
    plot(report, png)
    log.info("wrote %s and %s", json_path, png)
    return json_path, png
