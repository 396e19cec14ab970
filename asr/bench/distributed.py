"""Benchmark of distributed training: hidden communication, straggler tolerance, scaling.

    python -m asr.bench distributed [--processes 1 2 4] [--algorithms ssgd adpsgd hadpsgd]
                                    [--steps 20] [--layers 2] [--hidden 256] [--batch 8]
                                    [--frames 200] [--out bench_distributed.json]

Learners are real processes on gloo (forked from this one), each training a BLSTM
(asr.models.blstm) on a fixed random batch of `batch` utterances x `frames` frames with the
real updaters (asr.distributed). Times are per step after `--warmup` steps, on one thread
per learner. For N processes and each algorithm it measures

  compute_s        a step of N learners that do not communicate (run side by side)
  comm_s           the algorithm's communication: a step whose forward/backward is empty,
                   minus such an empty step without communication (optimizer, clipping)
  step_s           the real step
  hidden_ratio     1 - max(0, step_s - compute_s) / comm_s: the share of the communication
                   that overlaps computation (ADPSGD's exchange runs during the forward and
                   backward; SSGD's all-reduce waits for the backward)
  samples_per_s    utterances per second over all learners (each learner's steps / its time)

and, with one learner slowed 2x (it sleeps a compute step's time after each of its steps),
`straggler_ratio` = samples_per_s with the straggler / without: SSGD's learners wait for it
at every all-reduce (all at the straggler's pace: 0.5), ADPSGD's do not ((N - 0.5) / N at best).
H-ADPSGD runs as nodes of 2 learners (4 processes = 2 nodes x 2). Throughput between
synchronisation points: epoch ends and checkpoints are not part of it.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import platform
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from asr.distributed.build import build_training_updater
from asr.distributed.context import DistributedContext, init_distributed
from asr.models.blstm import build_model
from asr.models.config import ModelConfig
from asr.utils.atomic import write_text

log = logging.getLogger("asr.bench.distributed")

SLOW_RANK = 1  # passive on ADPSGD's ring; in H-ADPSGD a non-leader of node 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def learner_config(algorithm: str, per_node: int) -> SimpleNamespace:
    train = SimpleNamespace(optimizer="sgd", lr=1e-3, momentum=0.9, weight_decay=0.0, warmup_steps=0, lr_decay=1.0,
                            grad_clip=5.0, max_frames=1, lr_scaling="none", lr_reference_frames=0)
    distributed = SimpleNamespace(algorithm=algorithm, backend="gloo", learners_per_node=per_node, timeout_s=600.0)
    return SimpleNamespace(train=train, distributed=distributed, device="cpu")


def learner(rank: int, world: int, port: int, job: dict, out: Path) -> None:
    """One learner process: `job['steps']` timed steps, then a clean close."""
    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    communicate = job["algorithm"] != "none"
    if not communicate:
        os.environ["WORLD_SIZE"] = "1"  # side by side, independent
    cfg = learner_config(job["algorithm"] if communicate else "none", job.get("per_node", 0))
    ctx = init_distributed(cfg) if communicate else DistributedContext()
    torch.manual_seed(0)
    a = job["arch"]
    model = build_model(ModelConfig(num_layers=a["layers"], hidden_size=a["hidden"], dropout=0.0), a["feat_dim"], a["outputs"])
    updater = build_training_updater(model, cfg, ctx)
    gen = torch.Generator().manual_seed(rank)
    feats = torch.randn(a["batch"], a["frames"], a["feat_dim"], generator=gen)
    lens = torch.full((a["batch"],), a["frames"])
    params = list(model.parameters())

    def loss() -> torch.Tensor:
        if job.get("comm_only"):
            return sum(p.sum() for p in params) * 0.0
        log_probs, _ = model(feats, lens)
        return -log_probs.mean()

    slow = job.get("slow_s", 0.0) if rank == SLOW_RANK else 0.0
    start = time.perf_counter()
    for step in range(job["warmup"] + job["steps"]):
        if step == job["warmup"]:
            start = time.perf_counter()
        updater.begin_step()
        updater.step(loss(), weight=a["batch"])
        if slow:
            time.sleep(slow)
    seconds = time.perf_counter() - start
    updater.close()
    ctx.close()
    (out / f"{rank}.json").write_text(json.dumps({"rank": rank, "seconds": seconds}))


def run_job(job: dict, processes: int) -> dict:
    """Fork `processes` learners; per-step time (mean over learners) and samples per second."""
    out = Path(tempfile.mkdtemp(prefix="bench-distributed."))
    port = free_port()
    fork = multiprocessing.get_context("fork")
    procs = [fork.Process(target=learner, args=(r, processes, port, job, out)) for r in range(processes)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"benchmark job {job} failed: exit codes {[p.exitcode for p in procs]}")
    seconds = [json.loads((out / f"{r}.json").read_text())["seconds"] for r in range(processes)]
    shutil.rmtree(out, ignore_errors=True)
    steps, batch = job["steps"], job["arch"]["batch"]
    return {
        "step_s": sum(seconds) / len(seconds) / steps,
        "slowest_step_s": max(seconds) / steps,
        "samples_per_s": sum(steps * batch / s for s in seconds),
    }


def measure(args) -> dict:
    arch = {"layers": args.layers, "hidden": args.hidden, "batch": args.batch, "frames": args.frames, "feat_dim": args.feat_dim, "outputs": 300}
    base = {"arch": arch, "steps": args.steps, "warmup": args.warmup}
    results: dict = {"compute_only": {}, "algorithms": {}}
    for n in args.processes:
        compute = run_job(base | {"algorithm": "none"}, n)
        empty = run_job(base | {"algorithm": "none", "comm_only": True}, n)
        results["compute_only"][n] = compute | {"empty_step_s": empty["step_s"]}
        log.info("%d process(es), compute only: %.3f s/step, %.1f utterances/s", n, compute["step_s"], compute["samples_per_s"])
        if n == 1:
            continue
        for algorithm in args.algorithms:
            if algorithm == "hadpsgd" and n % 2:
                continue
            job = base | {"algorithm": algorithm, "per_node": 2}
            full, comm_only = run_job(job, n), run_job(job | {"comm_only": True}, n)
            comm = max(1e-6, comm_only["step_s"] - empty["step_s"])
            exposed = max(0.0, full["step_s"] - compute["step_s"])
            row = {
                "step_s": full["step_s"], "compute_s": compute["step_s"], "comm_s": comm, "exposed_comm_s": exposed,
                "hidden_ratio": min(1.0, max(0.0, 1.0 - exposed / comm)), "samples_per_s": full["samples_per_s"],
            }
            if n in args.straggler_processes:
                slowed = run_job(job | {"slow_s": compute["step_s"]}, n)
                row |= {"straggler_samples_per_s": slowed["samples_per_s"], "straggler_ratio": slowed["samples_per_s"] / full["samples_per_s"]}
            results["algorithms"].setdefault(algorithm, {})[n] = row
            log.info("%d processes, %s: %s", n, algorithm, {k: round(v, 3) for k, v in row.items()})
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.bench distributed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--algorithms", nargs="+", default=["ssgd", "adpsgd", "hadpsgd"])
    parser.add_argument("--straggler-processes", type=int, nargs="*", default=[4], help="process counts to run the 2x-straggler case at")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8, help="utterances per learner and step")
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--feat-dim", type=int, default=80)
    parser.add_argument("--out", default="bench_distributed.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s [%(name)s] %(message)s")
    logging.getLogger("asr.distributed").setLevel(logging.WARNING)  # per-learner start-up lines
    # The first optimizer imports torch's compiler machinery: once here, not in every learner.
    torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    start = time.time()
    results = measure(args)
    report = {
        "benchmark": "distributed",
        "settings": vars(args),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__, "python": sys.version.split()[0]},
        "seconds": round(time.time() - start, 1),
        "results": results,
    }
    write_text(args.out, json.dumps(report, indent=1) + "\n")
    log.info("wrote %s", args.out)
    return 0
