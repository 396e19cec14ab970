"""The comparison report: a Markdown table, the same rows as JSON, and a PNG of WER against
training time or epochs."""

from __future__ import annotations

import dataclasses
import json
import os

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from asr.report.experiments import Experiment  # noqa: E402
from asr.utils.atomic import atomic_path, write_text  # noqa: E402

SUBSETS = ("swb", "callhome", "total")
COLUMNS = (
    "Experiment",
    "Decode dir",
    "Config",
    "Epochs",
    "Training time",
    "Decoding",
    "Scorer",
    "WER SWB",
    "WER CH",
    "WER total",
)


def _cell(value, fmt: str) -> str:
    return "" if value is None else format(value, fmt)


def _hours(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


def markdown_table(experiments: list[Experiment]) -> str:
    """One row per experiment; a GMM system's alignment accuracy in a last column when any has one."""
    boundaries = any(e.boundaries is not None for e in experiments)
    columns = [*COLUMNS, *(["Phone boundaries within tolerance (%)"] if boundaries else [])]
    header = "| " + " | ".join(columns) + " |"
    rule = "|---|---|---|---:|---:|---|---|---:|---:|---:|" + ("---:|" if boundaries else "")
    rows = [
        "| "
        + " | ".join(
            [
                e.name,
                e.decode_dir,
                e.config,
                _cell(e.epochs, "d"),
                _hours(e.train_seconds),
                e.decoding,
                e.scorer,
                *(_cell(e.wer.get(s), ".2f") for s in SUBSETS),
                *([_cell(e.boundaries, ".1f")] if boundaries else []),
            ]
        )
        + " |"
        for e in experiments
    ]
    return "\n".join([header, rule, *rows]) + "\n"


def time_unit(seconds: list[float]) -> tuple[str, float]:
    """The unit that reads best for the longest of these times, and its length in seconds."""
    longest = max(seconds, default=0.0)
    if longest >= 2 * 3600:
        return "hours", 3600.0
    return ("minutes", 60.0) if longest >= 120 else ("seconds", 1.0)


def point_label(e: Experiment) -> str:
    """The experiment and how it was decoded: two decodings of one model are two points."""
    return f"{e.name}: {e.decoding}" if e.decoding else f"{e.name}: {e.decode_dir}"


def plot_wer(experiments: list[Experiment], path: str | os.PathLike) -> str:
    """WER (total, and SWB/CallHome where present) against training time; epochs when no
    experiment has a training time. Returns the x-axis used."""
    timed = [e for e in experiments if e.train_seconds is not None]
    by_time = bool(timed)
    points = timed if by_time else [e for e in experiments if e.epochs is not None] or experiments
    unit, scale = time_unit([e.train_seconds for e in timed])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    markers = {"total": "o", "swb": "s", "callhome": "^"}
    for subset in SUBSETS:
        xs, ys, labels = [], [], []
        for e in points:
            if subset in e.wer:
                xs.append(e.train_seconds / scale if by_time else (e.epochs or 0))
                ys.append(e.wer[subset])
                labels.append(point_label(e))
        if xs:
            ax.scatter(xs, ys, marker=markers[subset], label=subset)
            if subset == "total":
                for x, y, label in zip(xs, ys, labels):
                    ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.ticklabel_format(axis="x", useOffset=False, style="plain")
    ax.set_xlabel(f"training time ({unit})" if by_time else "epochs")
    ax.set_ylabel("WER (%)")
    ax.set_title("WER on the evaluation set")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
    return "time" if by_time else "epochs"


def rows_json(experiments: list[Experiment]) -> str:
    rows = [dataclasses.asdict(e) | {"path": str(e.path)} for e in experiments]
    return json.dumps(rows, indent=1) + "\n"


def write_report(experiments: list[Experiment], out: str) -> str:
    """<out>.md, <out>.json and <out>.png; returns the Markdown table."""
    table = markdown_table(experiments)
    write_text(f"{out}.md", table)
    write_text(f"{out}.json", rows_json(experiments))
    plot_wer(experiments, f"{out}.png")
    return table
