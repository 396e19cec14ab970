"""The cluster benchmark's numbers: repeats summarised as mean and spread, learners split by
role, and the figure and Markdown tables drawn from the report (cluster.json) alone, so that
docs can quote a committed json and regenerate both from it (`--replot`)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from asr.utils.atomic import atomic_path, write_text  # noqa: E402
from asr.utils.errors import InputError  # noqa: E402

FORMAT = 2  # of cluster.json: `points` per layout and step size, `links` per point
NAMES = {"ssgd": "SSGD", "adpsgd": "ADPSGD", "hadpsgd": "H-ADPSGD"}
DEFAULT_BUCKETS_RUN = "ssgd_25mb_buckets"  # SSGD with torch's default buckets, beside the chosen ones
DELAYED = "_delay_by_one"  # suffix of an ADPSGD / H-ADPSGD run with distributed.delay_by_one=true


def spread(values: list[float]) -> dict:
    """Repeats of one measurement: their mean, min and max, and the values themselves."""
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values), "repeats": list(values)}


def mean_step(timings: list[dict]) -> float:
    """The mean over learners of each learner's mean step time (its first steps left out;
    a learner that took no step has none)."""
    means = [t["step_seconds_mean"] for t in timings if t["step_seconds_mean"] is not None]
    return statistics.fmean(means) if means else float("nan")


def throughput(timings: list[dict]) -> float:
    """Utterances per second of training: all learners' utterances over the slowest learner's
    training time (the epoch lasts until its last batch is done)."""
    return sum(t["utterances"] for t in timings) / max(t["train_seconds"] for t in timings)


def by_role(timings: list[dict]) -> dict[str, list[dict]]:
    """Learners grouped by their role in the exchange (timing's `role`: active, passive,
    alone); SSGD's learners have none and are `all`."""
    groups: dict[str, list[dict]] = {}
    for t in timings:
        groups.setdefault(t.get("role") or "all", []).append(t)
    return groups


def run_summary(repeats: list[tuple[list[dict], int]], compute_s: list[float]) -> dict:
    """One algorithm at one link, over its repeats (each: the learners' timings, bytes host 0
    sent): step time and its ratio to the compute-only step of the same repeat (`compute_s`,
    one per repeat), for all learners and per role."""
    steps = [mean_step(timings) for timings, _ in repeats]
    roles: dict[str, list[float]] = {}
    for timings, _ in repeats:
        for role, learners in by_role(timings).items():
            roles.setdefault(role, []).append(mean_step(learners))

    def over_compute(values: list[float]) -> dict:
        return spread([step / compute for step, compute in zip(values, compute_s, strict=True)])  # never clamped

    return {
        "step_s": spread(steps),
        "step_over_compute": over_compute(steps),
        "by_role": {
            role: {"step_s": spread(values), "step_over_compute": over_compute(values)}
            for role, values in sorted(roles.items())
        },
        "roles": [t.get("role") for t in repeats[0][0]],
        "steps_by_learner": [[t["steps"] for t in timings] for timings, _ in repeats],
        "host0_sent_bytes": [sent for _, sent in repeats],
    }


def straggler_summary(pairs: list[tuple[list[dict], list[dict]]], ideal: float) -> dict:
    """One algorithm's (even, slowed) epochs over the repeats: throughputs and their ratio,
    paired by repeat (the two runs of a repeat follow each other)."""
    even = [throughput(e) for e, _ in pairs]
    slowed = [throughput(s) for _, s in pairs]
    return {
        "utterances_per_s": spread(even),
        "slowed_utterances_per_s": spread(slowed),
        "ratio": spread([s / e for e, s in zip(even, slowed)]),
        "ideal": ideal,
        "roles": [t.get("role") for t in pairs[0][1]],
        "steps_by_learner_slowed": [[t["steps"] for t in s] for _, s in pairs],
    }


# --- drawing from the report alone ---------------------------------------------------------


def load(path: Path) -> dict:
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise InputError(f"{path}: cannot read a cluster report ({err}); give the cluster.json a run wrote") from err
    if report.get("benchmark") != "cluster" or report.get("format") != FORMAT:
        raise InputError(
            f"{path}: not a cluster report of format {FORMAT} (an older benchmark's, or another file); "
            "rerun `python -m asr.bench cluster`"
        )
    return report


def write_outputs(report: dict, json_path: Path) -> tuple[Path, Path]:
    """The figure and the tables beside `json_path` (same name, .png and .md)."""
    png, md = json_path.with_suffix(".png"), json_path.with_suffix(".md")
    plot(report, png)
    write_text(md, markdown(report))
    return png, md


def mbit(rate: float) -> str:
    if rate == 0:
        return "unlimited"
    return f"{rate:,.0f} Mbit/s" if rate >= 100 else f"{rate:.3g} Mbit/s"


def ranged(stats: dict, fmt: str, suffix: str = "") -> str:
    """mean (min-max), or the mean alone for one repeat."""
    mean = format(stats["mean"], fmt) + suffix
    if len(stats["repeats"]) < 2:
        return mean
    return f"{mean} ({format(stats['min'], fmt)}-{format(stats['max'], fmt)})"


def decentralized_name(point: dict) -> str:
    return NAMES[point["algorithm"]]


def link_label(link: dict) -> str:
    what = {"fast": "a tenth of a step", "one_step": "one step"}.get(link["link"])
    transfer = f"weights in {link['weights_transfer_s']:.3g} s" if link["rate_mbit"] else "no limit"
    measured = f"; an exchange alone {link['exchange_s']['mean']:.3g} s" if "exchange_s" in link else ""
    if link.get("exchange_cpu_s") is not None:
        measured += f" and {link['exchange_cpu_s']:.2g} CPU-s"
    if link.get("node_step_cpu_s") is not None:
        measured += f"; the nodes' collectives of a step {link['node_step_cpu_s']:.2g} CPU-s"
    return f"{mbit(link['rate_mbit'])} ({transfer}{', ' + what if what else ''}{measured})"


def ratio(run: dict | None) -> str:
    """A run's step over the compute-only step, or - for a run not made."""
    return ranged(run["step_over_compute"], ".2f", "x") if run else "-"


def step_rows(report: dict) -> list[str]:
    rows = [
        "| layout | frames per learner | link | compute only | SSGD | SSGD, 25 MB buckets "
        "| ADPSGD / H-ADPSGD | active | passive | delay by one | its active | its passive |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for point in report["points"]:
        for link in point["links"]:
            compute = ranged(link.get("compute_only", point["compute_only"])["step_s"], ".3f", " s")
            runs = link["runs"]
            roles = runs.get(point["algorithm"], {}).get("by_role", {})
            delayed = runs.get(point["algorithm"] + DELAYED)
            delayed_roles = (delayed or {}).get("by_role", {})
            cells = [
                point["layout"],
                f"{point['frames']:,}" + (" (paper)" if point["paper_step"] else ""),
                link_label(link),
                compute,
                ratio(runs.get("ssgd")),
                ratio(runs.get(DEFAULT_BUCKETS_RUN)),
                f"{decentralized_name(point)} {ratio(runs.get(point['algorithm']))}",
                ratio(roles.get("active")),
                ratio(roles.get("passive")),
                ratio(delayed),
                ratio(delayed_roles.get("active")),
                ratio(delayed_roles.get("passive")),
            ]
            rows.append("| " + " | ".join(cells) + " |")
    return rows


def straggler_rows(report: dict) -> list[str]:
    rows = [
        "| one host at half speed | link | algorithm | utterances/s, even | slowed | ratio | ideal |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for entry in report["straggler"]:
        where = f"{entry['layout']}, {entry['frames']:,} frames, {entry['utterances']:,} utterances"
        for algorithm in entry["algorithms"]:
            run = entry[algorithm]
            cells = [
                where,
                mbit(entry["rate_mbit"]),
                NAMES[algorithm],
                ranged(run["utterances_per_s"], ".1f"),
                ranged(run["slowed_utterances_per_s"], ".1f"),
                ranged(run["ratio"], ".3f"),
                f"{run['ideal']:.3g}",
            ]
            rows.append("| " + " | ".join(cells) + " |")
    return rows


def repeats(count: int) -> str:
    return f"mean of {count} repeats (min-max)" if count > 1 else "one run each"


def markdown(report: dict) -> str:
    settings = report["settings"]
    paired = all("compute_only" in link for point in report["points"] for link in point["links"])
    yardstick = (
        "the compute-only step measured just before it (same layout, step size and link)"
        if paired
        else "the compute-only step of the same layout and step size"
    )
    head = (
        f"Step time over {yardstick}; {repeats(settings['repeats'])}, "
        f"{settings['steps']} steps per learner and run; "
        f"{report['model_parameters']:,} parameters ({report['weights_bytes'] / 1e6:.3g} MB of weights), "
        f"SSGD's buckets {report['ssgd_bucket_cap_mb']:.3g} MB; {report['machine']['cpus']} CPUs, "
        f"{report['seconds']:,.0f} s."
    )
    parts = [head, "", *step_rows(report)]
    if report["straggler"]:
        parts += ["", *straggler_rows(report)]
    return "\n".join(parts) + "\n"


def bars(ax, groups: list[str], series: dict[str, list[dict | None]], key: str) -> None:
    """Grouped bars of each series' `key` mean, with min-max whiskers (missing: no bar)."""
    width = 0.8 / max(1, len(series))
    for i, (label, entries) in enumerate(series.items()):
        xs = [x + i * width for x, e in enumerate(entries) if e]
        stats = [e[key] for e in entries if e]
        means = [s["mean"] for s in stats]
        errors = [[m - s["min"] for m, s in zip(means, stats)], [s["max"] - m for m, s in zip(means, stats)]]
        ax.bar(xs, means, width, yerr=errors, capsize=2, label=label)
    ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(groups))], groups, rotation=30, ha="right")
    ax.legend(fontsize=7)


def plot_steps(ax, report: dict) -> None:
    groups, series = [], {"SSGD": [], "SSGD, 25 MB buckets": [], "active": [], "passive": [], "delay by one": []}
    for point in report["points"]:
        for link in point["links"]:
            groups.append(f"{point['layout']} {point['frames']} {link['link']} {link['rate_mbit']:.4g}")
            ours = link["runs"].get(point["algorithm"], {}).get("by_role", {})
            series["SSGD"].append(link["runs"].get("ssgd"))
            series["SSGD, 25 MB buckets"].append(link["runs"].get(DEFAULT_BUCKETS_RUN))
            series["active"].append(ours.get("active"))
            series["passive"].append(ours.get("passive"))
            series["delay by one"].append(link["runs"].get(point["algorithm"] + DELAYED))
    bars(ax, groups, {k: v for k, v in series.items() if any(v)}, "step_over_compute")
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_ylabel("step time / compute-only step")
    ax.set_title("communication hidden (1.0) or exposed; ADPSGD / H-ADPSGD by role", fontsize=9)


def plot_straggler(ax, report: dict) -> None:
    groups, series, ideals = [], {"SSGD": [], "ADPSGD / H-ADPSGD": []}, []
    for entry in report["straggler"]:
        groups.append(f"{entry['layout']} {entry['frames']} {entry['rate_mbit']:.4g}")
        ours = [a for a in entry["algorithms"] if a != "ssgd"]
        series["SSGD"].append(entry.get("ssgd"))
        series["ADPSGD / H-ADPSGD"].append(entry[ours[0]] if ours else None)
        ideals.append([e["ideal"] if e else None for e in (series["SSGD"][-1], series["ADPSGD / H-ADPSGD"][-1])])
    bars(ax, groups, {k: v for k, v in series.items() if any(v)}, "ratio")
    width = 0.8 / max(1, sum(any(v) for v in series.values()))
    for x, pair in enumerate(ideals):
        marks = [(x + i * width, ideal) for i, ideal in enumerate(i for i in pair if i is not None)]
        ax.scatter(*zip(*marks), color="k", marker="_", s=150, zorder=3)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("epoch throughput, one host at half speed / even")
    ax.set_title("a slow host (ideal: black marks)", fontsize=9)


def plot(report: dict, path: Path) -> None:
    links = sum(len(p["links"]) for p in report["points"])
    fig = Figure(figsize=(max(10, 3 + 0.9 * links + 0.6 * len(report["straggler"])), 4.5), dpi=100)
    plot_steps(fig.add_subplot(1, 2, 1), report)
    if report["straggler"]:
        plot_straggler(fig.add_subplot(1, 2, 2), report)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
