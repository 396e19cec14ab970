"""The sweep's table (`sweep.md`) and figure (`sweep.png`): held-out loss against the global
batch per algorithm, the baseline and its tolerance marked, as the paper's Figure 1, and the
held-out loss per epoch of the runs."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a display
from matplotlib.figure import Figure  # noqa: E402

from asr.sweep.sweep import SweepResult  # noqa: E402
from asr.sweep.verdict import Point, Verdict  # noqa: E402
from asr.utils.atomic import atomic_path, write_text  # noqa: E402


def setup_line(setup: dict) -> str:
    s = setup
    nodes = f" (H-ADPSGD: {s['learners'] // s['learners_per_node']} nodes x {s['learners_per_node']})" if any(
        a.startswith("hadpsgd") for a in s["algorithms"]) else ""
    optimizer = (f"SGD with {'Nesterov ' if s['nesterov'] else ''}momentum {s['momentum']}" if s["optimizer"] == "sgd" else "Adam")
    speeds = "speeds as configured" if s["speeds"] else f"speeds drawn in [{1 - s['speed_spread']:g}, {1 + s['speed_spread']:g}]"
    return (f"{s['learners']} simulated learners{nodes}; {s['train_utterances']:,} training utterances, {s['held_out_utterances']} held out; "
            f"{s['epochs']} epochs; BLSTM {s['model']['num_layers']}x{s['model']['hidden_size']}; {optimizer}, lr {s['lr']:g} at {s['base_batch']} utterances "
            f"scaled {s['lr_scaling']} with the global batch, warm-up over {s['warmup_epochs']:g} epoch, x{s['lr_decay']:g} per epoch; "
            f"{speeds}, each step's time x [{1 - s['jitter']:g}, {1 + s['jitter']:g}], a weight exchange {s['exchange_time']:g} step.")


def cell(point: Point | None, verdict: Verdict) -> str:
    """The mean held-out loss, the mean excess over the same seeds' baseline, ✓ if it converges."""
    if point is None:
        return ""
    if point.mean is None:
        return "diverged"
    seeds = f", {len(point.losses)} seeds" if len(point.losses) > 1 else ""
    return f"{point.mean:.4f} ({100 * point.excess:+.1f}%{seeds}){' ✓' if verdict.converges(point) else ''}"


def table(result: SweepResult) -> str:
    verdict, setup = result.verdict, result.setup
    algorithms = list(verdict.points)
    by_batch = {(p.algorithm, p.global_batch): p for series in verdict.points.values() for p in series}
    lrs = {r["global_batch"]: r["lr"] for r in result.runs}
    steps = {r["global_batch"]: r["steps_per_epoch"] for r in result.runs if r["algorithm"] != "baseline"}
    base = verdict.baseline
    seeds = ", ".join(f"{loss:.4f}" for loss in base.losses)
    lines = [
        "# Held-out loss against the global batch (the paper's Figure 1), simulated learners", "",
        setup_line(setup), "",
        f"Baseline, one learner at batch {base.global_batch}: held-out loss {base.mean:.4f} (seeds {', '.join(map(str, base.seeds))}: {seeds}). "
        f"Each run is compared with the baseline of its seed (the same initial weights and data order); a point converges (✓) when "
        f"its held-out loss is at most {100 * verdict.tolerance:g}% above that baseline's, on average over its seeds. In brackets: "
        "that excess.", "",
        "| global batch | per learner | updates per epoch | lr | " + " | ".join(algorithms) + " |",
        "|" + "---:|" * (4 + len(algorithms)),
    ]
    for batch in sorted({p.global_batch for series in verdict.points.values() for p in series}):
        cells = " | ".join(cell(by_batch.get((a, batch)), verdict) for a in algorithms)
        lines.append(f"| {batch} | {batch // setup['learners']} | {steps.get(batch, '')} | {lrs[batch]:g} | {cells} |")
    largest = ", ".join(f"{a} {b if b is not None else 'none'}" for a, b in verdict.largest_converging_batch.items())
    ratio = f"{verdict.ratio:g}" if verdict.ratio is not None else "undefined (SSGD or ADPSGD converges at no batch of the sweep)"
    lines += ["", f"Largest converging global batch: {largest}. ADPSGD's over SSGD's: {ratio} (the paper: 3).", ""]
    return "\n".join(lines)


def plot(result: SweepResult, path: Path) -> None:
    verdict = result.verdict
    fig = Figure(figsize=(12, 4.6), dpi=100)
    by_batch, per_epoch = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    base = verdict.baseline
    finite = [loss for series in verdict.points.values() for p in series for loss in p.losses if loss is not None] + base.losses
    top = min(max(finite), 2 * base.mean) * 1.05
    batches = sorted({p.global_batch for series in verdict.points.values() for p in series})
    by_batch.axhline(base.mean, color="black", linestyle="--", linewidth=1, label=f"baseline (1 learner, batch {base.global_batch})")
    by_batch.axhspan(base.mean, verdict.threshold, color="grey", alpha=0.2, label=f"within {100 * verdict.tolerance:g}%")
    for algorithm, series in verdict.points.items():
        line = by_batch.plot([p.global_batch for p in series], [min(p.mean, top) if p.mean is not None else top for p in series],
                             "-", label=algorithm)[0]
        color = line.get_color()
        for p in series:
            seeds = [min(loss, top) if loss is not None else top for loss in p.losses]
            by_batch.plot([p.global_batch] * len(seeds), seeds, ".", color=color, alpha=0.5)
            if p.mean is None or p.mean > top:
                by_batch.plot([p.global_batch], [top], "x", color=color, markersize=9)
            else:  # filled: converges (compared with the same seeds' baseline)
                by_batch.plot([p.global_batch], [p.mean], "o", color=color, markerfacecolor=color if verdict.converges(p) else "white")
    by_batch.set_xscale("log", base=2)
    by_batch.set_xticks(batches, [str(b) for b in batches])
    by_batch.set_ylim(top=top)
    by_batch.set_xlabel("global batch (utterances)")
    by_batch.set_ylabel(f"held-out loss after {result.setup['epochs']} epochs")
    by_batch.set_title("filled: converges; x: diverged or above the axis", fontsize=10)
    for r in result.runs:
        if r["seed"] != result.setup["seeds"][0] or r["algorithm"] not in ("baseline", "ssgd", "adpsgd"):
            continue
        log = r["epochs_log"]
        style = {"baseline": "k-", "ssgd": "-", "adpsgd": "--"}[r["algorithm"]]
        label = "baseline" if r["algorithm"] == "baseline" else f"{r['algorithm']} {r['global_batch']}"
        per_epoch.plot([e["epoch"] for e in log], [min(e["held_out_loss"], top) if e["held_out_loss"] is not None else top for e in log],
                       style, label=label)
    per_epoch.set_ylim(top=top)
    per_epoch.set_xlabel("epoch")
    per_epoch.set_ylabel("held-out loss")
    per_epoch.set_title("SSGD (solid) and ADPSGD (dashed), first seed")
    for ax in (by_batch, per_epoch):
        ax.grid(alpha=0.3)
    by_batch.legend(fontsize=8)
    per_epoch.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")


def write_report(result: SweepResult, out_dir: Path) -> None:
    write_text(Path(out_dir) / "sweep.md", table(result))
    plot(result, Path(out_dir) / "sweep.png")
