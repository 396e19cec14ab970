"""The sweep's tables (`sweep.md`) and figure (`sweep.png`): the baseline's calibration, the
mixing rates, both verdicts with every point; held-out loss per epoch of SSGD and ADPSGD at
several batches (the paper's Figure 1), and final held-out loss against the batch and the lr,
on log axes with nothing clipped (a diverged run has no loss: it is marked on a row above all).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a display
from matplotlib.figure import Figure  # noqa: E402

from asr.sweep.sweep import BUDGET, SweepResult  # noqa: E402
from asr.sweep.verdict import BASELINE, Measurement, Point, converges  # noqa: E402
from asr.utils.atomic import atomic_path, write_text  # noqa: E402

PER_EPOCH = ("ssgd", "adpsgd")  # the paper's Figure 1
PER_EPOCH_BATCHES = 4  # at most this many batches in the per-epoch panel


def setup_line(setup: dict) -> str:
    s, t = setup, setup["train"]
    nodes = (
        f" (H-ADPSGD: {s['learners'] // s['learners_per_node']} nodes x {s['learners_per_node']})"
        if any(a.startswith("hadpsgd") for a in s["algorithms"])
        else ""
    )
    optimizer = (
        f"SGD with {'Nesterov ' if t.get('nesterov') else ''}momentum {t.get('momentum')}"
        if t.get("optimizer") == "sgd"
        else str(t.get("optimizer"))
    )
    speeds = (
        "speeds as configured"
        if s["speeds"]
        else f"speeds drawn in [{1 - s['speed_spread']:g}, {1 + s['speed_spread']:g}]"
    )
    data = (
        f"{s['train_samples']:,} training samples of {t.get('chunk_frames')} frames "
        f"(of {s['train_utterances']:,} utterances), "
        f"{s['held_out_samples']:,} held out (of {s['held_out_utterances']} utterances); batches in samples"
        if s.get("train_samples")
        else f"{s['train_utterances']:,} training utterances, {s['held_out_utterances']} held out"
    )
    r = s.get("regime")
    visits = (
        f" At the largest batch ({r['largest_batch']:,}) each {r['unit'][:-1]} is seen "
        f"{r['visits_per_item_at_largest_batch']} times in {r['updates_at_largest_batch']:,} updates."
        if r
        else ""
    )
    return (
        f"{s['learners']} simulated learners{nodes}; {data}; "
        f"{s['epochs']} epochs at every batch{epoch_passes(s)}; "
        f"BLSTM {s['model']['num_layers']}x{s['model']['hidden_size']}; "
        f"objective {t.get('objective')}; {optimizer}, warm-up over {s['warmup_epochs']:g} epoch, "
        f"x{t.get('lr_decay')} per epoch; {speeds}, each step's time x [{1 - s['jitter']:g}, {1 + s['jitter']:g}], "
        f"a weight exchange {s['exchange_time']:g} step.{visits}"
    )


def epoch_passes(setup: dict) -> str:
    if setup.get("budget", "epochs") == "epochs":
        return ""
    return f" (an epoch: batch / {setup['base_batch']} passes over the samples, the baseline's updates)"


def cell(point: Point | None, tolerance: float) -> str:
    """The mean held-out loss, its excess over the same seeds' baseline, the seeds' spread, ✓ if it converges."""
    if point is None:
        return ""
    if point.mean is None:
        return f"diverged ({sum(loss is None for loss in point.losses)} of {len(point.losses)} seeds)"
    seeds = f", {len(point.losses)} seeds ±{point.spread / 2:.4f}" if len(point.losses) > 1 else ""
    failure = {"generalisation": " overfit", "optimisation": " unoptimised"}.get(point.failure(tolerance) or "", "")
    return f"{point.mean:.4f} ({100 * point.excess:+.1f}%{seeds}){' ✓' if converges(point, tolerance) else failure}"


def verdict_line(m: Measurement, unit: str) -> str:
    values = ", ".join(f"{a} {v:g}" if v is not None else f"{a} none" for a, v in m.largest.items())
    ratios = ", ".join(
        f"{a} {r:g}{ratio_range(m.ratio_range.get(a))}" if r is not None else f"{a} undefined"
        for a, r in m.ratio.items()
    )
    return f"**{m.name}** ({unit}): {values}. Over SSGD's: {ratios or 'no SSGD in the sweep'}."


def ratio_range(bounds) -> str:
    """What the grid allows the ratio to be: each limit lies below the first point that fails."""
    if not bounds:
        return ""
    low, high = ("?" if b is None else f"{b:.2g}" for b in bounds)
    return f" (within the grid's steps: {low} to {high})"


def noise_lines(noise: dict | None) -> list[str]:
    if not noise or noise.get("final") is None:
        return []
    epochs = ", ".join("?" if v is None else f"{v:.3g}" for v in noise["per_epoch"])
    limits = ", ".join(
        f"{a} {v:g}" if v is not None else f"{a} none" for a, v in noise["largest_converging_batch"].items()
    )
    paper = noise["paper_switchboard"]
    return [
        "## Gradient noise scale",
        "",
        f"B_simple (arXiv 1812.06162) at the baseline's weights after each epoch, from mean gradients over "
        f"{noise['rounds']} batches of {noise['big_batch']} and their {noise['small_batch']}-item parts: {epochs} "
        f"(mean over seeds). Linear lr scaling should hold up to batches of about B_noise; the largest converging "
        f"batches: {limits}. The paper's Switchboard: at least {paper['noise_scale_at_least']:,} {paper['unit']} "
        f"({paper['why']}).",
        "",
    ]


def measurement_table(m: Measurement, tolerance: float, axis_label: str, extra=None) -> list[str]:
    algorithms = list(m.points)
    values = sorted({getattr(p, m.axis) for series in m.points.values() for p in series})
    found = {(p.algorithm, getattr(p, m.axis)): p for series in m.points.values() for p in series}
    head = [axis_label] + ([c for c, _ in extra] if extra else [])
    lines = ["| " + " | ".join(head + algorithms) + " |", "|" + "---:|" * (len(head) + len(algorithms))]
    for value in values:
        first = [f"{value:g}"] + ([f(value) for _, f in extra] if extra else [])
        lines.append("| " + " | ".join(first + [cell(found.get((a, value)), tolerance) for a in algorithms]) + " |")
    return lines


def table(result: SweepResult) -> str:
    base, setup, tol = result.baseline, result.setup, result.baseline.tolerance
    best = base.best
    grid = ", ".join(f"{p.lr:g}: " + ("diverged" if p.mean is None else f"{p.losses[0]:.4f}") for p in base.grid)
    seeds = ", ".join(f"{loss:.4f}" for loss in best.losses)
    settled = "settled" if base.settled else "**not settled**: more epochs would lower the line (raise sweep.epochs)"
    improvements = ", ".join("?" if i is None else f"{100 * i:.2f}%" for i in base.last_improvements)
    at_edge = best.lr in (base.grid[0].lr, base.grid[-1].lr) and len(base.grid) > 1
    edge = " (at the edge of sweep.baseline_lrs)" if at_edge else ""
    lines = [
        "# Convergence against lr and global batch, simulated learners",
        "",
        setup_line(setup),
        "",
        f"Budget: {BUDGET[setup.get('budget', 'epochs')]}.",
        "",
        "## Baseline",
        "",
        f"One learner at batch {best.global_batch}, held-out loss per lr (seed {setup['seeds'][0]}): {grid}. "
        f"Best lr {best.lr:g}{edge}: "
        f"{best.mean:.4f} over seeds {', '.join(map(str, best.seeds))} ({seeds}; spread {best.spread:.4f}). "
        f"Its last epoch lowered it by {improvements} ({settled}: less than {100 * tol / 2:g}%, half the tolerance, "
        f"wanted). A point converges (✓) when no seed diverged and its held-out loss is at most {100 * tol:g}% above "
        f"the baseline of its seed, on average over its seeds; points within {100 * setup['close_margin']:g}% of that "
        f"line get {len(set(setup['seeds']) | set(setup['extra_seeds']))} seeds. "
        "In brackets: that excess, and half the seeds' spread.",
        "",
        "## Mixing",
        "",
        "Per-step consensus rate: the second-largest eigenvalue modulus of the expected mixing matrix (0: every step "
        "averages exactly; near 1: slow).",
        "",
        "| algorithm | topology | nodes | consensus rate |",
        "|---|---|---:|---:|",
        *[f"| {a} | {m['topology']} | {m['nodes']} | {m['consensus_rate']:.4f} |" for a, m in result.mixing.items()],
        "",
        f"## Critical lr at global batch {setup['critical_batch']} (no lr scaling)",
        "",
        *measurement_table(result.critical, tol, "lr"),
        "",
        verdict_line(result.critical, "the largest lr that converges"),
        "",
        f"## Largest converging batch (lr {best.lr:g} at batch {setup['base_batch']}, scaled {setup['lr_scaling']})",
        "",
        *measurement_table(
            result.batches,
            tol,
            "global batch",
            [
                ("per learner", lambda b: str(int(b) // setup["learners"])),
                ("lr", lambda b: f"{lr_of(result.batches, b):g}"),
            ],
        ),
        "",
        verdict_line(result.batches, "the largest batch that converges"),
        "",
        "A point that fails is marked overfit when its loss on a slice of the training samples is within the "
        "tolerance of the baseline's (it optimised but does not generalise), unoptimised when it is not.",
        "",
        *noise_lines(result.noise),
    ]
    return "\n".join(lines)


def lr_of(m: Measurement, batch) -> float:
    return next(p.lr for series in m.points.values() for p in series if p.global_batch == batch)


class DivergedRow:
    """Log axes show every finite loss; a diverged run has none and is drawn on a row above them."""

    def __init__(self, ax, finite: list[float]):
        self.ax = ax
        self.low, high = min(finite), max(finite)
        self.y = high * 1.25

    def finish(self) -> None:
        self.ax.set_yscale("log")
        self.ax.axhline(self.y, color="grey", linestyle=":", linewidth=1)
        self.ax.text(
            1.0, self.y, " diverged", transform=self.ax.get_yaxis_transform(), va="center", fontsize=7, color="grey"
        )
        self.ax.set_ylim(self.low / 1.1, self.y * 1.1)
        self.ax.grid(alpha=0.3, which="both")


def point_losses(m: Measurement) -> list[float]:
    return [loss for series in m.points.values() for p in series for loss in p.losses if loss is not None]


def plot_series(ax, row: DivergedRow, m: Measurement, tolerance: float) -> None:
    count = len(m.points)
    for index, (algorithm, series) in enumerate(m.points.items()):
        side = 1.04 ** (index - (count - 1) / 2)  # diverged marks of one x side by side, not on top of each other
        xs = [getattr(p, m.axis) for p in series]
        line = ax.plot(
            [x for x, p in zip(xs, series) if p.mean is not None],
            [p.mean for p in series if p.mean is not None],
            "-",
            label=algorithm,
            linewidth=1.2,
        )[0]
        color = line.get_color()
        for x, p in zip(xs, series):
            seeds = [loss for loss in p.losses if loss is not None]
            ax.plot([x] * len(seeds), seeds, ".", color=color, alpha=0.5, markersize=4)
            if p.diverged:
                ax.plot([x * side], [row.y], "x", color=color, markersize=7)
            else:  # filled: converges
                ax.plot(
                    [x],
                    [p.mean],
                    "o",
                    color=color,
                    markerfacecolor=color if converges(p, tolerance) else "white",
                    markersize=5,
                )


def plot(result: SweepResult, path: Path) -> None:
    base, tol = result.baseline, result.baseline.tolerance
    fig = Figure(figsize=(18, 5.2), dpi=100)
    per_epoch, by_batch, by_lr = (fig.add_subplot(1, 3, i) for i in (1, 2, 3))
    # Held-out loss per epoch, SSGD against ADPSGD at several batches of the batch verdict.
    batches = sorted({p.global_batch for a in PER_EPOCH for p in result.batches.points.get(a, [])})
    step = max(1, -(-len(batches) // PER_EPOCH_BATCHES))
    shown = batches[::step]
    wanted = {
        (p.algorithm, p.global_batch, p.lr)
        for a in PER_EPOCH
        for p in result.batches.points.get(a, [])
        if p.global_batch in shown
    }
    first_seed = result.setup["seeds"][0]
    curves = [
        r
        for r in result.runs
        if r["seed"] == first_seed
        and (
            (r["algorithm"] == BASELINE and r["lr"] == base.best.lr)
            or (r["algorithm"], r["global_batch"], r["lr"]) in wanted
        )
    ]
    first_base = base.best.losses[base.best.seeds.index(first_seed)]
    row = DivergedRow(
        per_epoch, [e["held_out_loss"] for r in curves for e in r["epochs_log"] if e["held_out_loss"] is not None]
    )
    rows = [row] + [
        DivergedRow(ax, point_losses(m) + [first_base, base.best.mean])
        for ax, m in ((by_batch, result.batches), (by_lr, result.critical))
    ]
    colors = {}
    for r in curves:
        log = r["epochs_log"]
        epochs = [e["epoch"] for e in log if e["held_out_loss"] is not None]
        losses = [e["held_out_loss"] for e in log if e["held_out_loss"] is not None]
        if r["algorithm"] == BASELINE:
            # wide and pale: SSGD at the baseline's batch trains the same and is drawn over it
            per_epoch.plot(
                epochs,
                losses,
                "k-",
                linewidth=4,
                alpha=0.3,
                zorder=1,
                label=f"baseline (1 learner, batch {base.best.global_batch})",
            )
            continue
        color = colors.setdefault(r["global_batch"], f"C{len(colors)}")
        style = "-" if r["algorithm"] == "ssgd" else "--"
        per_epoch.plot(
            epochs, losses, style, color=color, marker=".", label=f"{r['algorithm']} batch {r['global_batch']}"
        )
        if r["diverged"]:
            per_epoch.plot([log[-1]["epoch"]], [row.y], "x", color=color, markersize=8)
    per_epoch.set_xlabel("epoch")
    per_epoch.set_ylabel("held-out loss")
    per_epoch.set_title("SSGD (solid) and ADPSGD (dashed), lr scaled; first seed", fontsize=10)
    per_epoch.legend(fontsize=7, ncol=2)
    for ax, row, m, label in (
        (
            by_batch,
            rows[1],
            result.batches,
            f"global batch ({'samples' if result.setup.get('train_samples') else 'utterances'})",
        ),
        (by_lr, rows[2], result.critical, f"lr (global batch {result.setup['critical_batch']})"),
    ):
        # Most points have the first seed only, and each seed is judged against its own baseline.
        ax.axhline(first_base, color="black", linestyle="--", linewidth=1, label=f"baseline, seed {first_seed}")
        ax.axhspan(first_base, first_base * (1 + tol), color="grey", alpha=0.2, label=f"within {100 * tol:g}% of it")
        if len(base.best.seeds) > 1:
            ax.axhline(
                base.best.mean,
                color="black",
                linestyle=":",
                linewidth=1,
                label=f"baseline, mean of {len(base.best.seeds)} seeds",
            )
        plot_series(ax, row, m, tol)
        ax.set_xscale("log", base=2)
        values = sorted({getattr(p, m.axis) for series in m.points.values() for p in series})
        ax.set_xticks(values, [f"{v:g}" for v in values])
        ax.set_xlabel(label)
        ax.set_ylabel(f"held-out loss after {result.setup['epochs']} epochs")
        ax.legend(fontsize=7)
    by_batch.set_title("lr scaled with the batch; filled: converges, x: diverged", fontsize=10)
    by_lr.set_title("fixed batch, lr grid; filled: converges, x: diverged", fontsize=10)
    for row in rows:
        row.finish()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")


def write_report(result: SweepResult, out_dir: Path) -> None:
    write_text(Path(out_dir) / "sweep.md", table(result))
    plot(result, Path(out_dir) / "sweep.png")
