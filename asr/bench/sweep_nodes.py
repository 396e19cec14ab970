"""Benchmark of the sweep's batched nodes (sweep.batched_nodes, asr/sweep/batched.py): one
run per algorithm and global batch, its nodes stepped as one batched model and each alone.

    cd recipes/mini   # after ./run.sh --stop-stage 2 experiment=hybrid_ce
    python -m asr.bench sweep_nodes [--epochs 1] [--repeats 1] [--out exp/bench/sweep_nodes] \\
        -- experiment=hybrid_ce sweep=frames model.num_pdfs=N [any override of python -m asr.sweep]

Every point of the sweep's sweep.global_batches for each algorithm of sweep.algorithms but
SSGD (one node: nothing to batch), at the lr the batch verdict would give it from the middle of
sweep.baseline_lrs, trained by the sweep's own run function (asr/sweep/run.py train_run) for
--epochs epochs, batched then alone, --repeats times; each point's seconds, their ratio
(the speed-up), and the largest relative difference of the two runs' held-out losses. Writes
sweep_nodes.json and sweep_nodes.png into --out.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from asr.bench.output import machine, write_report
from asr.utils.log import log_to_stderr

log = logging.getLogger("asr.bench.sweep_nodes")


def points(cfg) -> list[tuple[str, int, float]]:
    from asr.sweep.run import scaled_lr

    scfg = cfg.sweep
    lrs = list(scfg.baseline_lrs)
    lr = lrs[len(lrs) // 2]
    return [
        (a, int(b), scaled_lr(scfg, lr, int(b)))
        for a in scfg.algorithms
        if not a.startswith("ssgd")
        for b in scfg.global_batches
    ]


def warm_up(data, settings) -> None:
    """What a process does once, before the first run is timed: the optimizers' first step
    imports modules (about 3 s), the first LSTM calls build their kernels."""
    from omegaconf import OmegaConf

    from asr.models.blstm import build_model
    from asr.sweep.run import simulation

    model = build_model(OmegaConf.create(settings.model), data.train.feat_dim, data.objective.num_outputs)
    simulation(settings, model, 1)
    shards = [[list(range(settings.per_learner_batch))]] * 2
    data.batched_gradients([model, model], shards)
    data.loss(model, shards[0])[0].backward()


def time_point(data, settings, repeats: int) -> dict:
    from asr.sweep.run import train_run

    seconds = {"batched": [], "alone": []}
    losses = {}
    for _ in range(repeats):
        for mode in ("batched", "alone"):  # alternating: a slower spell of the machine hits both
            data.batched_nodes = mode == "batched"
            start = time.perf_counter()
            run = train_run(data, settings)
            seconds[mode].append(time.perf_counter() - start)
            losses[mode] = [e["held_out_loss"] for e in run["epochs_log"]]
    batched, alone = (statistics.median(seconds[m]) for m in ("batched", "alone"))
    differences = [
        abs(a - b) / abs(b) for a, b in zip(losses["batched"], losses["alone"]) if a is not None and b is not None
    ]
    return {
        "algorithm": settings.algorithm,
        "global_batch": settings.global_batch,
        "per_learner_batch": settings.per_learner_batch,
        "lr": settings.lr,
        "seconds_batched": [round(s, 2) for s in seconds["batched"]],
        "seconds_alone": [round(s, 2) for s in seconds["alone"]],
        "speedup": round(alone / batched, 2),
        "held_out_relative_difference": max(differences, default=None),
    }


def run(args) -> dict:
    import torch

    from asr.config import load_config
    from asr.sweep.run import SweepData, model_config, run_settings, start_process, with_train_config
    from asr.sweep.sweep import check
    from asr.utils.device import cpu_name

    cfg = load_config(args.overrides)
    check(cfg)
    cfg = with_train_config(cfg)
    start_process(int(cfg.train.threads))
    data = SweepData(cfg)
    results = []
    for n, (algorithm, batch, lr) in enumerate(points(cfg)):
        settings = replace(run_settings(cfg, algorithm, batch, lr, int(cfg.sweep.seeds[0])), epochs=args.epochs)
        if n == 0:
            warm_up(data, settings)
        result = time_point(data, settings, args.repeats)
        log.info(
            "%s at %d: batched %.1f s, alone %.1f s: %.2fx (held-out losses %.1e apart)",
            algorithm,
            batch,
            statistics.median(result["seconds_batched"]),
            statistics.median(result["seconds_alone"]),
            result["speedup"],
            result["held_out_relative_difference"] or 0.0,
        )
        results.append(result)
    return {
        "benchmark": "sweep_nodes",
        "overrides": args.overrides,
        "epochs": args.epochs,
        "repeats": args.repeats,
        "learners": int(cfg.sweep.learners),
        "learners_per_node": int(cfg.sweep.learners_per_node),
        "train_samples": data.num_items,
        "model": model_config(cfg),
        "machine": machine(cpu=cpu_name(), torch_threads=torch.get_num_threads()),
        "points": results,
    }


def plot(report: dict, path: Path) -> None:
    from asr.utils.atomic import atomic_path

    fig = Figure(figsize=(6, 4), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    for algorithm in dict.fromkeys(p["algorithm"] for p in report["points"]):
        mine = [p for p in report["points"] if p["algorithm"] == algorithm]
        ax.plot([p["global_batch"] for p in mine], [p["speedup"] for p in mine], marker="o", label=algorithm)
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("global batch")
    ax.set_ylabel("seconds alone / batched")
    ax.set_title(f"sweep runs, {report['learners']} learners: nodes batched against each alone")
    ax.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.bench sweep_nodes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=1, help="epochs per run (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per point and mode (default %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("exp/bench/sweep_nodes"))
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as python -m asr.sweep takes them")
    args = parser.parse_args(argv)
    log_to_stderr()
    start = time.time()
    report = run(args)
    report["seconds"] = round(time.time() - start, 1)
    write_report(report, args.out, "sweep_nodes", plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
