"""Distributed training on an emulated cluster: does the communication hide behind the
computation, and does a slow host slow only itself? Measured through the real entry point.

    python -m asr.bench cluster [--recipe-dir recipes/mini] [--steps 30] [--repeats 3]
                                [--frames [LAYOUT:]FRAMES ...] [--sweep] [--rates auto | MBIT ...]
                                [--layouts 2x1 2x2] [--algorithms ssgd decentralized]
                                [--delay-by-one] [--exchange-rounds 10]
                                [--straggler-utts 2400] [--out DIR] [overrides...]
    python -m asr.bench cluster --replot DIR/cluster.json    # cluster.png and cluster.md from it

Hosts are network namespaces joined by veth links through a bridge, every link rate-limited in
both directions with `tc ... tbf` (asr/bench/netns.py). Learners are real `torchrun --nnodes`
processes, one per host and learner, running `python -m asr.train` (the recipe's data and
features, `train.threads=1`) pinned to a core per host (`taskset`), for a fixed number of
steps (`train.max_steps`; asr/bench/cluster_jobs.py). Per learner, `asr.train` writes its step
times and its role in the exchange (timing/*.json).

Step size. A learner's batch is FRAMES padded frames (`train.max_frames`), so that steps cost
about the same (with a fixed number of utterances of varying length, an exchange sized to the
mean step outlasts every short step). `--frames` takes several values, each `FRAMES` (every
layout) or `LAYOUT:FRAMES` (that layout); a layout none names gets the paper's step: 4,032 per
learner for N x 1 (ADPSGD: 192 utterances x 21 frames) and 2,688 for N x L with L > 1
(H-ADPSGD: 128 x 21). `--sweep` adds 2,688, 4,032, 6,000 and 12,000 to every layout's values,
after them. Each (layout, frames) is a point of the report.

For each point (`NxL`: N hosts of L learners; 2 cores: host n on core n mod 2):
  compute_only   the same learners with distributed=none, side by side on the same cores: the
                 compute-only step time t of this layout and step size; once to set the
                 links (--rates auto only), then again before every repeat at each link (the
                 runs' yardstick)
  links          `--rates auto`: two link rates from t and the model's size P, the one-step
                 link, where an exchange of the weights (P x 32 bits) takes t, and the fast
                 link, ten times that; or the rates given, in Mbit/s (0: unlimited)
  runs           at each link, SSGD and ADPSGD (N x 1) or H-ADPSGD (N x L) (--algorithms
                 ssgd, decentralized: both by default, or one of them): the step time and
                 step time over t (never clamped: 1.0 means the communication is hidden, 2.0
                 that a step takes twice as long), for all learners and for the active and the
                 passive ones apart; bytes sent on host 0's link; and --exchange-rounds
                 exchanges of the weights timed alone on the link (link_probe.py: what the
                 payload's time becomes on the wire, headers and acknowledgements included,
                 and the CPU time the machine spends on one, the emulated network's included;
                 with several learners per host also the CPU time of the nodes' all-reduce and
                 all-gather of one step). At the fastest link also SSGD with torch's 25 MB
                 buckets (distributed.bucket_cap_mb=25) beside the configured ones (auto:
                 asr/distributed/ssgd.py): what the all-reduce overlapping the backward pass
                 saves. `--delay-by-one`: ADPSGD / H-ADPSGD also with
                 distributed.delay_by_one=true, whose exchange overlaps a whole step.
  straggler      (each layout, at its first frames value, at each of its links) one epoch over
                 --straggler-utts utterances with host 1's core shared with one CPU-bound
                 competitor per learner, which halves that host's speed, and without them:
                 epoch throughput (utterances per second of training) with over without.
                 ADPSGD's and H-ADPSGD's ideal is (N - 0.5) / N; SSGD's is 0.5 where
                 communication costs little (every step waits for the slow host's compute),
                 nearer 1 where it dominates the step.

Every measurement is repeated --repeats times (the algorithms interleaved): the report gives
the mean, min and max, and each repeat's value; a ratio's repeats divide each run's step by
the compute-only step of the same repeat and link, measured just before it, a straggler
ratio's each slowed epoch by the even one before it.
Writes cluster.json, cluster.png and cluster.md (the tables) into --out; `--replot` draws the
last two again from a json alone. Needs root for the namespaces; where they cannot be made it
says so and exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from asr.bench import netns
from asr.bench.cluster_jobs import Launcher
from asr.bench.cluster_report import (
    DEFAULT_BUCKETS_RUN,
    DELAYED,
    FORMAT,
    load,
    mean_step,
    run_summary,
    spread,
    straggler_summary,
    write_outputs,
)
from asr.bench.output import machine, settings, write_json
from asr.utils.errors import InputError
from asr.utils.log import log_to_stderr

log = logging.getLogger("asr.bench.cluster")

DECENTRALIZED = {1: "adpsgd"}  # learners per host -> the algorithm; more than one: hadpsgd
PAPER_FRAMES = {1: 4032, 2: 2688}  # padded frames per learner: ADPSGD 192 x 21, H-ADPSGD 128 x 21
SWEEP_FRAMES = (2688, 4032, 6000, 12000)
FAST_LINK = 10  # the fast link: this many times the one-step link


def parse_layout(text: str) -> tuple[int, int]:
    try:
        hosts, learners = (int(n) for n in text.lower().split("x"))
    except ValueError:
        raise InputError(f"--layouts {text}: write HOSTSxLEARNERS, e.g. 2x1 or 2x2") from None
    if hosts < 2 or learners < 1:
        raise InputError(f"--layouts {text}: needs at least 2 hosts and 1 learner per host")
    return hosts, learners


def decentralized(per_host: int) -> str:
    return DECENTRALIZED.get(per_host, "hadpsgd")


def frames_plan(values: list[str], layouts: list[str], sweep: bool) -> dict[str, list[int]]:
    """Each layout's step sizes, in the order given (see the module's docstring)."""
    plan: dict[str, list[int]] = {layout: [] for layout in layouts}
    for value in values:
        layout, _, number = value.rpartition(":")
        if layout and layout not in plan:
            raise InputError(f"--frames {value}: {layout} is not among --layouts ({' '.join(layouts)})")
        if not number.isdigit() or int(number) < 1:
            raise InputError(f"--frames {value}: write FRAMES or LAYOUT:FRAMES, FRAMES a positive whole number")
        for name in [layout] if layout else layouts:
            plan[name].append(int(number))
    for layout, frames in plan.items():
        per_host = parse_layout(layout)[1]
        frames[:] = frames or [PAPER_FRAMES[min(per_host, 2)]]
        frames.extend(SWEEP_FRAMES if sweep else ())
        frames[:] = list(dict.fromkeys(frames))  # each once, the first kept first
    return plan


def link_rates(rates: list[str], params: int, compute_s: float | None) -> list[tuple[str, float]]:
    """(label, Mbit/s) of the links a point is measured at; `compute_s`, the calibrating step,
    is needed only for auto."""
    if rates == ["auto"]:
        one_step = params * 32 / compute_s / 1e6
        return [("fast", one_step * FAST_LINK), ("one_step", one_step)]
    return [("given", float(r)) for r in dict.fromkeys(rates)]


def cpu(seconds: float | None) -> str:
    return "unknown" if seconds is None else f"{seconds:.3f}"


def is_fastest(rate: float, links: list[tuple[str, float]]) -> bool:
    """Whether `rate` is the fastest of the links (0: unlimited, the fastest of all)."""
    return (rate or float("inf")) == max(r or float("inf") for _, r in links)


@dataclass
class Session:
    args: argparse.Namespace
    launcher: Launcher
    cluster: netns.EmulatedCluster
    params: int

    @property
    def repeats(self) -> range:
        return range(self.args.repeats)


def calibrate(s: Session, layout: str, frames: int) -> float | None:
    """The compute-only step that sets the links (--rates auto); None where the rates are given,
    which need no run to set them."""
    if s.args.rates != ["auto"]:
        return None
    hosts, per_host = parse_layout(layout)
    name = f"calibrate_{layout}_{frames}f"
    step = mean_step(s.launcher.compute_only(name, hosts, per_host, frames, s.args.steps))
    log.info("compute only, %s, %d frames: %.3f s per step (sets the links)", layout, frames, step)
    return step


def measure_point(s: Session, layout: str, frames: int) -> dict:
    per_host = parse_layout(layout)[1]
    calibration = calibrate(s, layout, frames)
    rates = link_rates(s.args.rates, s.params, calibration)
    links = [measure_link(s, layout, frames, label, rate, is_fastest(rate, rates)) for label, rate in rates]
    paired = [step for link in links for step in link["compute_only"]["step_s"]["repeats"]]
    return {
        "layout": layout,
        "frames": frames,
        "paper_step": frames == PAPER_FRAMES[min(per_host, 2)],
        "algorithm": decentralized(per_host),
        "calibration_step_s": calibration,
        "compute_only": {"step_s": spread([step for step in (calibration, *paired) if step is not None])},
        "links": links,
    }


def chosen(algorithms: list[str], per_host: int) -> list[str]:
    """--algorithms as the layout runs them (decentralized: ADPSGD or H-ADPSGD)."""
    return [decentralized(per_host) if a == "decentralized" else a for a in algorithms]


def link_runs(algorithms: list[str], fastest_link: bool, delay_by_one: bool = False) -> dict[str, tuple[str, ...]]:
    """The runs at one link: name -> (distributed algorithm, extra overrides)."""
    runs = {a: (a,) for a in algorithms}
    if fastest_link and "ssgd" in algorithms:
        runs[DEFAULT_BUCKETS_RUN] = ("ssgd", "distributed.bucket_cap_mb=25")
    if delay_by_one:
        runs |= {a + DELAYED: (a, "distributed.delay_by_one=true") for a in algorithms if a != "ssgd"}
    return runs


def measure_link(s: Session, layout: str, frames: int, label: str, rate: float, fast: bool) -> dict:
    """Every repeat runs the compute-only learners first, then each run at this link: a run's
    ratio is over the compute-only step measured just before it (this shared host's speed
    drifts between minutes more than the runs differ)."""
    hosts, per_host = parse_layout(layout)
    s.cluster.set_rate(rate)
    probe = {}
    if s.args.exchange_rounds:
        name = f"probe_{layout}_{frames}f_{rate:g}mbit"
        alone = s.launcher.exchange_alone(s.cluster, name, per_host, s.params, s.args.exchange_rounds)
        probe = {
            "exchange_s": spread(alone["exchange_s"]),
            "exchange_cpu_s": alone["machine_cpu_s_per_exchange"],
            "node_step_cpu_s": alone.get("machine_cpu_s_per_node_step"),
        }
        node = f", the nodes' collectives of a step {cpu(probe['node_step_cpu_s'])}" if per_host > 1 else ""
        log.info(
            "%s at %g Mbit/s: one exchange alone takes %.3f s and %s CPU-s of the machine%s",
            *(layout, rate, probe["exchange_s"]["mean"], cpu(probe["exchange_cpu_s"]), node),
        )
    runs = link_runs(chosen(s.args.algorithms, per_host), fast, s.args.delay_by_one)
    done: dict[str, list] = {name: [] for name in runs}
    compute: list[float] = []
    for r in s.repeats:
        tag = f"{layout}_{frames}f_{rate:g}mbit_r{r}"
        compute.append(mean_step(s.launcher.compute_only(f"compute_{tag}", hosts, per_host, frames, s.args.steps)))
        for name, (algorithm, *extra) in runs.items():
            limit = s.args.steps if algorithm == "ssgd" else s.args.steps * hosts  # decentralized: over all hosts
            overrides = [f"distributed={algorithm}", f"train.max_steps={limit}", *extra]
            timings, sent = s.launcher.distributed(s.cluster, f"{name}_{tag}", per_host, frames, *overrides)
            done[name].append((timings, sent))
            step = mean_step(timings)
            log.info("%s_%s: %.3f s per step, %.2f x compute-only", name, tag, step, step / compute[-1])
    return {
        "link": label,
        "rate_mbit": rate,
        "weights_transfer_s": s.params * 32 / (rate * 1e6) if rate else 0.0,
        **probe,
        "compute_only": {"step_s": spread(compute)},
        "runs": {name: run_summary(repeats, compute) for name, repeats in done.items()},
    }


def measure_straggler(s: Session, point: dict, link: dict) -> dict:
    hosts, per_host = parse_layout(point["layout"])
    s.cluster.set_rate(link["rate_mbit"])
    utts = s.args.straggler_utts
    algorithms = chosen(s.args.algorithms, per_host)
    pairs: dict[str, list] = {a: [] for a in algorithms}
    for r in s.repeats:
        for algorithm in algorithms:
            job = f"straggler_{algorithm}_{point['layout']}_{point['frames']}f_{link['rate_mbit']:g}mbit_r{r}"
            overrides = [f"distributed={algorithm}", "train.epochs=1", f"train.subset_utts={utts}"]
            even, _ = s.launcher.distributed(s.cluster, f"{job}_even", per_host, point["frames"], *overrides)
            slowed, _ = s.launcher.distributed(
                s.cluster, f"{job}_slowed", per_host, point["frames"], *overrides, slowed_host=1
            )
            pairs[algorithm].append((even, slowed))
    ideals = {"ssgd": 0.5, point["algorithm"]: (hosts - 0.5) / hosts}
    entry = {a: straggler_summary(pairs[a], ideals[a]) for a in algorithms}
    for a in algorithms:
        log.info(
            "straggler %s, %s at %g Mbit/s: ratio %.3f",
            point["layout"],
            a,
            link["rate_mbit"],
            entry[a]["ratio"]["mean"],
        )
    return {
        "layout": point["layout"],
        "frames": point["frames"],
        "link": link["link"],
        "rate_mbit": link["rate_mbit"],
        "utterances": utts,
        "slowed_host": 1,
        "algorithms": algorithms,
    } | entry


def model_facts(recipe_dir: Path, overrides: list[str]) -> dict:
    """The size of the model the runs train (what an exchange or an all-reduce moves), and the
    bucket size SSGD's DDP gets for it (distributed.bucket_cap_mb)."""
    from asr.config import load_config
    from asr.distributed.ssgd import bucket_cap_mb
    from asr.features.featureset import read_feat_dim
    from asr.models.blstm import build_model
    from asr.train.objectives import build_objective

    with contextlib.chdir(recipe_dir):
        cfg = load_config(["distributed=ssgd", *overrides])
        feat_dim = read_feat_dim(Path(cfg.features.feats_dir) / cfg.features.name / cfg.data.train_set)
        model = build_model(cfg.model, feat_dim, build_objective(cfg).num_outputs)
    params = sum(p.numel() for p in model.parameters())
    return {
        "model_parameters": params,
        "weights_bytes": params * 4,
        "ssgd_bucket_cap_mb": bucket_cap_mb(cfg.distributed.bucket_cap_mb, model),
    }


def run(args, plan: dict[str, list[int]]) -> dict:
    facts = model_facts(args.recipe_dir, args.overrides)
    work = Path(tempfile.mkdtemp(prefix="bench-cluster."))
    launcher = Launcher(work, args.recipe_dir, args.utts, args.overrides, args.timeout)
    hosts = parse_layout(args.layouts[0])[0]
    try:
        with netns.EmulatedCluster(hosts) as cluster:
            s = Session(args, launcher, cluster, facts["model_parameters"])
            points = [measure_point(s, layout, frames) for layout, sizes in plan.items() for frames in sizes]
            firsts = [next(p for p in points if p["layout"] == layout) for layout in plan]
            stragglers = [measure_straggler(s, p, link) for p in firsts for link in p["links"] if args.straggler_utts]
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return facts | {"points": points, "straggler": stragglers}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m asr.bench cluster", description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--recipe-dir", type=Path, default=Path("recipes/mini"), help="where the recipe's data, feats and lang are")
    add("--steps", type=int, default=30, help="steps per learner and run (default %(default)s)")
    add("--repeats", type=int, default=3, help="runs of every measurement (default %(default)s)")
    add(
        "--frames",
        nargs="+",
        default=[],
        metavar="[LAYOUT:]FRAMES",
        help="padded frames per learner and step, for every layout or LAYOUT's; several: each is a point "
        "(default: 4032 for Nx1, 2688 for NxL, L > 1: the paper's steps)",
    )
    add("--sweep", action="store_true", help=f"every layout also at {', '.join(map(str, SWEEP_FRAMES))} frames")
    add("--utts", type=int, default=1000, help="utterances per learner and step at most (default %(default)s)")
    add(
        "--algorithms",
        nargs="+",
        choices=("ssgd", "decentralized"),
        default=["ssgd", "decentralized"],
        help="what runs: ssgd (and beside it with 25 MB buckets), decentralized (ADPSGD, H-ADPSGD)",
    )
    add(
        "--delay-by-one",
        action="store_true",
        help="also run ADPSGD / H-ADPSGD with distributed.delay_by_one=true (each average one step late)",
    )
    add(
        "--exchange-rounds",
        type=int,
        default=10,
        help="exchanges timed alone at each link, after a warm-up (0: none; default %(default)s)",
    )
    add("--rates", nargs="+", default=["auto"], help="link rates in Mbit/s (0: unlimited), or auto (per point)")
    add("--layouts", nargs="+", default=["2x1", "2x2"], help="hosts x learners per host")
    add("--straggler-utts", type=int, default=2400, help="utterances in the straggler epoch (0: skip it)")
    add("--timeout", type=float, default=1800.0)
    add("--keep", action="store_true", help="keep the runs' experiment dirs and logs")
    add("--out", type=Path, default=Path("exp/bench"))
    add("--replot", type=Path, metavar="JSON", help="only draw the figure and tables again from a report")
    add("overrides", nargs="*", help="Hydra overrides for every training run (key=value)")
    return parser.parse_args(argv)


def check(args) -> dict[str, list[int]]:
    """The run's plan (layout -> frames), or InputError for options that cannot make one."""
    if len({parse_layout(t)[0] for t in args.layouts}) != 1:
        raise InputError(f"--layouts: every layout needs the same number of hosts (got {' '.join(args.layouts)})")
    if args.repeats < 1 or args.steps < 1:
        raise InputError("--repeats and --steps: at least 1")
    if args.exchange_rounds < 0:
        raise InputError("--exchange-rounds: 0 or more")
    if args.rates != ["auto"] and not all(r.replace(".", "", 1).isdigit() for r in args.rates):
        raise InputError(f"--rates {' '.join(args.rates)}: give auto, or rates in Mbit/s (0: unlimited)")
    return frames_plan(args.frames, args.layouts, args.sweep)


def measure(args) -> int:
    plan = check(args)
    ok, why = netns.available()
    if not ok:
        raise InputError(f"cluster benchmark: {why}")
    start = time.time()
    report = run(args, plan)
    report = {
        "benchmark": "cluster",
        "format": FORMAT,
        "settings": settings(args),
        "machine": machine(),
        "seconds": round(time.time() - start, 1),
    } | report
    write_json(report, args.out / "cluster.json")
    png, md = write_outputs(report, args.out / "cluster.json")
    log.info("wrote %s, %s and %s", args.out / "cluster.json", png, md)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log_to_stderr()
    try:
        if args.replot:
            png, md = write_outputs(load(args.replot), args.replot)
            log.info("wrote %s and %s", png, md)
            return 0
        return measure(args)
    except InputError as err:
        print(f"python -m asr.bench cluster: error: {err}", file=sys.stderr)
        return 2
