"""Microbenchmark of one ADPSGD weight exchange: its CPU time and the fresh memory it takes, on
the active and the passive side, over the real transport.

    python -m asr.bench exchange [--models mini swb] [--exchanges 20] [--warmup 3]
                                 [--compare BEFORE.json] [--out exp/bench]

Two processes on this machine (one torch thread each, as the learners run) join a gloo group
and average a model's weights as asr.train's ADPSGD does (AdpsgdUpdater with its real
ActiveExchanger and PassiveServer), at the sizes of the models the recipes train:

  mini   the mini recipe's BLSTM (3 x 256, 3.9 M parameters, 15.8 MB)
  swb    the SWB-2000 hybrid model of the paper (6 x 512 BLSTM, 256 bottleneck, 9,000 pdfs:
         37.2 M parameters, 149 MB)

The active learner runs steps that only exchange (begin_step, prepare_mix, the fold); the
passive learner's main thread folds each exchange its server thread answered. Per exchange,
after --warmup exchanges:

  cpu_ms        the process's CPU time (user + system, every thread: the main thread, the
                exchange's thread, gloo's) over the exchanges
  main_cpu_ms   the main thread's CPU time alone (what a learner's own steps lose)
  fresh_mb      new memory the exchange touches: minor page faults x the page size, with
                glibc told to map every allocation of 1 MiB or more afresh
                (MALLOC_MMAP_THRESHOLD_), so a new full-model buffer shows as its pages;
                `buffers` is that over the size of the weights
  transport     the same counters for a bare swap of two buffers allocated once, in the same
                processes: the part of an exchange that is gloo's and the kernel's

With --device cuda both learners keep their weights on the (one) GPU: the exchange's side stream,
pinned buffers and events are then what runs (staging.py); the bare swap stays on the host.

With --compare, an earlier run's JSON (of another version of the code) is drawn beside this one
and kept in the report under "compare". Writes exchange.json and exchange.png into --out.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import socket
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from asr.bench.output import machine, settings, write_report
from asr.utils.log import log_to_stderr

log = logging.getLogger("asr.bench.exchange")

MMAP_THRESHOLD = 1 << 20  # bytes: every allocation this large is mapped afresh, so it faults its pages in
PAGE = os.sysconf("SC_PAGE_SIZE")

# name -> (ModelConfig fields, input dim, outputs): the models of the recipes
MODELS = {
    "mini": (dict(num_layers=3, hidden_size=256, bottleneck=0, stack_frames=3, subsample=3), 40, 34),
    "swb": (
        dict(num_layers=6, hidden_size=512, bottleneck=256, stack_frames=1, subsample=1, head="frame_ce"),
        260,
        9000,
    ),
    "toy": (dict(num_layers=1, hidden_size=192, bottleneck=0, stack_frames=3, subsample=3), 40, 34),  # the tests'
}


def build_parameters(name: str):
    from asr.models.blstm import build_model
    from asr.models.config import ModelConfig

    fields, feat_dim, outputs = MODELS[name]
    return build_model(ModelConfig(**fields), feat_dim, outputs)


class Counters:
    """CPU time (process, main thread), minor page faults and wall time since `start`."""

    def __init__(self):
        self.start = self._read()

    @staticmethod
    def _read() -> tuple[float, float, int, float]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime, time.thread_time(), usage.ru_minflt, time.perf_counter()

    def per(self, count: int, weights_bytes: int) -> dict:
        end = self._read()
        cpu, main_cpu, faults, wall = (b - a for a, b in zip(self.start, end))
        fresh = faults * PAGE / count
        return {
            "cpu_ms": round(1000 * cpu / count, 2),
            "main_cpu_ms": round(1000 * main_cpu / count, 2),
            "wall_ms": round(1000 * wall / count, 2),
            "fresh_mb": round(fresh / 1e6, 2),
            "buffers": round(fresh / weights_bytes, 2),
        }


def worker(rank: int, port: int, name: str, warmup: int, exchanges: int, device: str, results) -> None:
    """One learner: rank 0 active, rank 1 passive; its weights on `device`."""
    import torch
    import torch.distributed as dist

    from asr.distributed.adpsgd import AdpsgdUpdater
    from asr.distributed.exchange import PointToPoint
    from asr.distributed.hadpsgd import make_groups
    from asr.distributed.topology import Layout

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    layout = Layout(rank, 2, 1)
    groups = make_groups(layout)
    model_device = torch.device(device)
    model = build_parameters(name).to(model_device)
    weights_bytes = sum(p.numel() for p in model.parameters()) * 4
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    updater = AdpsgdUpdater(
        model, optimizer, None, 0.0, layout=layout, groups=groups, timeout_s=300.0, device=model_device
    )
    step = active_step if rank == 0 else passive_step
    for i in range(warmup):
        step(updater, i)
    dist.barrier()
    counters = Counters()
    for i in range(warmup, warmup + exchanges):
        step(updater, i)
    if model_device.type == "cuda":
        torch.cuda.synchronize()  # the last exchange's device work done inside the window
    exchange = counters.per(exchanges, weights_bytes)
    dist.barrier()
    updater.close()
    dist.barrier()
    transport = PointToPoint(groups.exchange)
    mine, theirs = torch.randn(weights_bytes // 4), torch.empty(weights_bytes // 4)
    for i in range(warmup + exchanges):
        if i == warmup:
            counters = Counters()
        transport.swap(mine, theirs, 1 - rank, active=rank == 0)
    bare = counters.per(exchanges, weights_bytes)
    dist.barrier()
    dist.destroy_process_group()
    results.put((rank, {"exchange": exchange, "transport": bare, "weights_bytes": weights_bytes}))


def active_step(updater, _: int) -> None:
    """A step of the active learner that only averages: snapshot, swap, fold."""
    updater.begin_step()
    mix = updater.prepare_mix()
    with updater.weights_lock():
        updater.apply_mix(mix)
    updater.end_step()


def passive_step(updater, i: int) -> None:
    """The passive learner's main thread folds the (i+1)-th exchange its server answered."""
    with updater.lock:
        updater.lock.wait_for(lambda: updater.exchanges > i or updater.exchanger.error is not None, timeout=300)
    mix = updater.prepare_mix()
    with updater.weights_lock():
        updater.apply_mix(mix)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(name: str, warmup: int, exchanges: int, device: str = "cpu") -> dict:
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    results = context.Queue()
    port = free_port()
    previous = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD)  # read by glibc as the children start
    try:
        procs = [
            context.Process(target=worker, args=(r, port, name, warmup, exchanges, device, results)) for r in (0, 1)
        ]
        for p in procs:
            p.start()
        got = dict(results.get(timeout=1800) for _ in procs)
        for p in procs:
            p.join()
    finally:
        if previous is None:
            os.environ.pop("MALLOC_MMAP_THRESHOLD_")
        else:
            os.environ["MALLOC_MMAP_THRESHOLD_"] = previous
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"a learner of the {name} exchange failed: exit codes {[p.exitcode for p in procs]}")
    active, passive = got[0], got[1]
    return {
        "parameters": active["weights_bytes"] // 4,
        "weights_mb": round(active["weights_bytes"] / 1e6, 1),
        "active": active["exchange"],
        "passive": passive["exchange"],
        "transport": {"active": active["transport"], "passive": passive["transport"]},
    }


def plot(report: dict, path: Path) -> None:
    runs = [(report.get("label") or "this run", report["models"])]
    if "compare" in report:
        runs.insert(0, (report["compare"].get("label", "compare"), report["compare"]["models"]))
    names = list(report["models"])
    fig = Figure(figsize=(5.5 * len(names), 4.2))
    for k, name in enumerate(names):
        ax = fig.add_subplot(1, len(names), k + 1)
        sides = ["active", "passive"]
        width = 0.8 / (len(runs) + 1)
        for j, (label, models) in enumerate(runs):
            values = [models[name][side]["cpu_ms"] for side in sides]
            bars = ax.bar([i + j * width for i in range(2)], values, width, label=f"exchange, {label}")
            ax.bar_label(bars, fmt="%.1f", fontsize=7)
        bare = [report["models"][name]["transport"][side]["cpu_ms"] for side in sides]
        bars = ax.bar([i + len(runs) * width for i in range(2)], bare, width, label="bare gloo swap", color="grey")
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
        ax.set_xticks([i + width * len(runs) / 2 for i in range(2)], sides)
        ax.set_ylabel("CPU ms per exchange (all threads)")
        mb = report["models"][name]["weights_mb"]
        ax.set_title(f"{name}: {mb:g} MB of weights")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.bench exchange", description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["mini", "swb"], choices=list(MODELS))
    parser.add_argument("--exchanges", type=int, default=20, help="timed exchanges per model (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=3, help="exchanges before timing (default %(default)s)")
    parser.add_argument("--device", default="cpu", help="where the weights are: cpu | cuda (default %(default)s)")
    parser.add_argument("--label", default="", help="names this run in a later --compare (default: none)")
    parser.add_argument("--compare", type=Path, help="an earlier exchange.json to draw beside this run")
    parser.add_argument("--out", type=Path, default=Path("exp/bench"))
    args = parser.parse_args(argv)
    log_to_stderr()
    compare = json.loads(args.compare.read_text()) if args.compare else None
    start = time.time()
    models = {}
    for name in args.models:
        models[name] = measure(name, args.warmup, args.exchanges, args.device)
        log.info("%s: %s", name, json.dumps(models[name]))
    report = {
        "benchmark": "exchange",
        "label": args.label,
        "settings": settings(args),
        "machine": machine(),
        "seconds": round(time.time() - start, 1),
        "models": models,
    }
    if compare is not None:
        report["compare"] = {k: compare[k] for k in ("label", "models") if k in compare}
    write_report(report, args.out, "exchange", plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
