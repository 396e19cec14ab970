"""The sweep's table (`sweep.md`) and figure (`sweep.png`): held-out loss against the global
batch per algorithm, as the paper's Figure 1, and the held-out loss per epoch of every run."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a display
from matplotlib.figure import Figure  # noqa: E402

from asr.utils.atomic import atomic_path, write_text  # noqa: E402


def table(results: list[dict]) -> str:
    """Markdown: one row per global batch, one held-out-loss column per algorithm."""
    algorithms = list(dict.fromkeys(r["algorithm"] for r in results))
    by_batch: dict[int, dict[str, dict]] = defaultdict(dict)
    for r in results:
        by_batch[r["global_batch"]][r["algorithm"]] = r
    header = "| global batch | per learner | " + " | ".join(f"{a} held-out loss" for a in algorithms) + " | " + " | ".join(f"{a} steps" for a in algorithms) + " |"
    lines = [header, "|" + "---:|" * (2 + 2 * len(algorithms))]
    for batch in sorted(by_batch):
        runs = by_batch[batch]
        per = next(iter(runs.values()))["per_learner_batch"]
        losses = " | ".join(fmt(runs[a]["held_out_loss"]) if a in runs else "" for a in algorithms)
        steps = " | ".join(str(runs[a]["steps"]) if a in runs else "" for a in algorithms)
        lines.append(f"| {batch} | {per} | {losses} | {steps} |")
    first = results[0]
    note = (f"\n{first['learners']} simulated learners, {first['epochs']} epochs; learning rate scaled with the global batch "
            f"(lr at each batch in sweep.json). Held-out loss: objective loss on the dev set with the average of the learners' weights.\n")
    return "\n".join(lines) + "\n" + note


def fmt(value: float) -> str:
    return "diverged" if not math.isfinite(value) else f"{value:.4f}"


def plot(results: list[dict], path: Path) -> None:
    fig = Figure(figsize=(11, 4.2), dpi=100)
    by_batch, per_epoch = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for algorithm in dict.fromkeys(r["algorithm"] for r in results):
        runs = sorted((r for r in results if r["algorithm"] == algorithm), key=lambda r: r["global_batch"])
        by_batch.plot([r["global_batch"] for r in runs], [r["held_out_loss"] for r in runs], "o-", label=algorithm)
        for r in runs:
            log = r["epochs_log"]
            per_epoch.plot([e["epoch"] for e in log], [e["held_out_loss"] for e in log],
                           "-" if algorithm == "ssgd" else "--", label=f"{algorithm} {r['global_batch']}")
    by_batch.set_xscale("log", base=2)
    by_batch.set_xlabel("global batch (utterances)")
    by_batch.set_ylabel(f"held-out loss after {results[0]['epochs']} epochs")
    by_batch.set_title(f"{results[0]['learners']} learners")
    per_epoch.set_xlabel("epoch")
    per_epoch.set_ylabel("held-out loss")
    for ax in (by_batch, per_epoch):
        ax.grid(alpha=0.3)
    by_batch.legend()
    per_epoch.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")


def write_report(results: list[dict], out_dir: Path) -> None:
    write_text(Path(out_dir) / "sweep.md", table(results))
    plot(results, Path(out_dir) / "sweep.png")
