"""Distributed training on an emulated cluster: does the communication hide behind the
computation, and does a slow learner slow only itself? Measured through the real entry point.

    python -m asr.bench cluster [--recipe-dir recipes/mini] [--steps 30] [--frames 12000]
                                [--rates auto | MBIT ...] [--layouts 2x1 2x2] [--out DIR] [overrides...]

Hosts are network namespaces joined by veth links through a bridge, every link rate-limited in
both directions with `tc ... tbf` (asr/bench/netns.py). Learners are real `torchrun --nnodes`
processes, one per host and learner, running `python -m asr.train` (the recipe's data and
features, `train.threads=1`) pinned to a core per host (`taskset`), for a fixed number of
steps (`train.max_steps`). Per learner, `asr.train` writes its step times (timing/*.json).
A learner's batch is `--frames` padded frames (12,000 by default: 120 s of audio), so that steps
cost about the same: with a fixed number of utterances of varying length, an exchange sized to
the mean step outlasts every short step and the learner waits for it there, however well it
overlaps the computation.

For each layout (`NxL`: N hosts of L learners; 2 cores: host n on core n mod 2):
  compute_only     the same learners with distributed=none, side by side on the same cores:
                   the compute-only step time
  ssgd, adpsgd / hadpsgd at each link rate: the step time, and step time over the compute-only
                   one (never clamped: 1.0 means the communication is hidden, 2.0 that a step
                   takes twice as long), bytes sent on host 0's link
  straggler        (layout 2x1, at each link rate) one epoch over --straggler-utts utterances
                   with a CPU-bound competitor pinned to host 1's core, which halves that
                   learner's speed, and without it: epoch throughput (utterances per second of
                   training) with over without. ADPSGD's ideal is (N - 0.5) / N; SSGD's is 0.5
                   where communication costs little (every step waits for the slow learner's
                   compute), nearer 1 where it dominates the step.

Link rates: `auto` picks two from the compute-only step t and the model's size P: P x 32 bits
in t (an exchange of the weights costs about one step) and ten times that (it costs little).
Writes cluster.json and cluster.png into --out. Needs root for the namespaces; where they
cannot be made it says so and exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from asr.bench import netns  # noqa: E402
from asr.utils.atomic import atomic_path, write_text  # noqa: E402

log = logging.getLogger("asr.bench.cluster")

DECENTRALIZED = {1: "adpsgd", 2: "hadpsgd"}  # learners per host -> the algorithm


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_layout(text: str) -> tuple[int, int]:
    hosts, learners = text.lower().split("x")
    return int(hosts), int(learners)


class Bench:
    def __init__(self, args, work: Path):
        self.args = args
        self.work = work
        self.cores = os.cpu_count() or 1
        self.python = sys.executable

    def core(self, host: int) -> str:
        return str(host % self.cores)

    def train_overrides(self, exp: Path, *extra: str) -> list[str]:
        return [
            f"exp_dir={exp}",
            "train.threads=1",
            f"train.max_utts={self.args.utts}",
            f"train.max_frames={self.args.frames}",
            "train.checkpoint_every_steps=1000000",
            "train.log_every_steps=1000000",
            "train.precision=fp32",
            "device=cpu",
            *self.args.overrides,
            *extra,
        ]

    def env(self, **extra: str) -> dict:
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[2]), **extra)
        for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(key, None)
        return env

    def timings(self, exp: Path) -> list[dict]:
        return [json.loads(p.read_text()) for p in sorted((exp / "timing").glob("learner-*.json"))]

    def wait(self, procs: list[subprocess.Popen], logs: list[Path], what: str) -> None:
        for proc in procs:
            proc.wait(timeout=self.args.timeout)
        failed = [i for i, p in enumerate(procs) if p.returncode != 0]
        if failed:
            tail = logs[failed[0]].read_text()[-3000:]
            raise RuntimeError(f"{what}: process(es) {failed} failed\n{tail}")

    def compute_only(self, hosts: int, per_host: int) -> list[dict]:
        """Every learner alone (distributed=none), side by side on its host's core."""
        procs, logs, exps = [], [], []
        for learner in range(hosts * per_host):
            exp = self.work / f"compute_{hosts}x{per_host}_{learner}"
            logs.append(exp.with_suffix(".log"))
            cmd = [
                "taskset",
                "-c",
                self.core(learner // per_host),
                self.python,
                "-m",
                "asr.train",
                *self.train_overrides(exp, f"train.max_steps={self.args.steps}"),
            ]
            procs.append(
                subprocess.Popen(
                    cmd, cwd=self.args.recipe_dir, env=self.env(), stdout=open(logs[-1], "w"), stderr=subprocess.STDOUT
                )
            )
            exps.append(exp)
        self.wait(procs, logs, f"compute-only {hosts}x{per_host}")
        return [t for exp in exps for t in self.timings(exp)]

    def distributed(
        self,
        cluster: netns.EmulatedCluster,
        name: str,
        algorithm: str,
        per_host: int,
        *extra: str,
        competitor_host: int | None = None,
    ) -> tuple[list[dict], int]:
        """One torchrun job over the hosts; (every learner's timing, bytes host 0 sent)."""
        exp = self.work / name
        if exp.exists():  # a finished run would be skipped, and its old timings read as new ones
            raise RuntimeError(f"{exp}: two runs of one benchmark share an experiment name")
        port, job = free_port(), uuid.uuid4().hex[:8]
        before = cluster.tx_bytes(0)
        procs, logs = [], []
        with self.competitor(competitor_host):
            for host in range(cluster.nodes):
                logs.append(self.work / f"{name}.host{host}.log")
                torchrun = [
                    self.python,
                    "-m",
                    "torch.distributed.run",
                    f"--nnodes={cluster.nodes}",
                    f"--node-rank={host}",
                    f"--nproc-per-node={per_host}",
                    "--rdzv-backend=c10d",
                    f"--rdzv-endpoint={cluster.address(0)}:{port}",
                    f"--rdzv-id={job}",
                    f"--local-addr={cluster.address(host)}",
                    f"--rdzv-conf=is_host={int(host == 0)}",
                    "-m",
                    "asr.train",
                    *self.train_overrides(exp, f"distributed={algorithm}", *extra),
                ]
                cmd = cluster.command(
                    host, ["taskset", "-c", self.core(host), "env", "GLOO_SOCKET_IFNAME=eth0", *torchrun]
                )
                procs.append(
                    subprocess.Popen(
                        cmd,
                        cwd=self.args.recipe_dir,
                        env=self.env(),
                        stdout=open(logs[-1], "w"),
                        stderr=subprocess.STDOUT,
                    )
                )
            self.wait(procs, logs, name)
        return self.timings(exp), cluster.tx_bytes(0) - before

    @contextlib.contextmanager
    def competitor(self, host: int | None):
        """A CPU-bound process on `host`'s core: that host's learner gets about half of it."""
        if host is None:
            yield
            return
        proc = subprocess.Popen(["taskset", "-c", self.core(host), self.python, "-c", "while True: pass"])
        try:
            time.sleep(0.5)
            yield
        finally:
            proc.kill()
            proc.wait()


def mean_step(timings: list[dict]) -> float:
    return sum(t["step_seconds_mean"] for t in timings) / len(timings)


def throughput(timings: list[dict]) -> float:
    """Utterances per second of training: all learners' utterances over the slowest learner's
    training time (the epoch lasts until its last batch is done)."""
    return sum(t["utterances"] for t in timings) / max(t["train_seconds"] for t in timings)


def model_parameters(recipe_dir: Path, overrides: list[str]) -> int:
    """The size of the model the runs train (what an exchange or an all-reduce moves)."""
    from asr.config import load_config
    from asr.features.featureset import read_feat_dim
    from asr.models.blstm import build_model
    from asr.train.objectives import build_objective

    with contextlib.chdir(recipe_dir):
        cfg = load_config(list(overrides))
        feat_dim = read_feat_dim(Path(cfg.features.feats_dir) / cfg.features.name / cfg.data.train_set)
        outputs = build_objective(cfg).num_outputs
        return sum(p.numel() for p in build_model(cfg.model, feat_dim, outputs).parameters())


def run(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="bench-cluster."))
    bench = Bench(args, work)
    params = model_parameters(args.recipe_dir, args.overrides)
    layouts = [parse_layout(text) for text in args.layouts]
    report: dict = {
        "model_parameters": params,
        "weights_bytes": params * 4,
        "compute_only": {},
        "links": [],
        "straggler": [],
    }
    try:
        for hosts, per_host in layouts:
            timings = bench.compute_only(hosts, per_host)
            report["compute_only"][f"{hosts}x{per_host}"] = {"step_s": mean_step(timings)}
            log.info("compute only, %dx%d: %.3f s per step", hosts, per_host, mean_step(timings))
        first = next(iter(report["compute_only"].values()))["step_s"]
        rates = args.rates if args.rates != ["auto"] else [params * 32 / first / 1e6 * 10, params * 32 / first / 1e6]
        rates = [float(r) for r in rates]
        with netns.EmulatedCluster(max(h for h, _ in layouts)) as cluster:
            for rate in rates:
                cluster.set_rate(rate)
                report["links"].append(measure_link(bench, cluster, rate, layouts, report["compute_only"], params))
                if args.straggler_utts:
                    report["straggler"].append(measure_straggler(bench, cluster, rate))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return report


def measure_link(bench: Bench, cluster, rate: float, layouts, compute_only: dict, params: int) -> dict:
    entry = {
        "rate_mbit": round(rate, 1),
        "weights_transfer_s": round(params * 32 / (rate * 1e6), 4) if rate else 0.0,
        "runs": {},
    }
    steps = bench.args.steps
    for hosts, per_host in layouts:
        compute = compute_only[f"{hosts}x{per_host}"]["step_s"]
        cluster_hosts = hosts
        assert cluster_hosts == cluster.nodes, "one cluster size per benchmark run"
        for algorithm in ("ssgd", DECENTRALIZED[per_host]):
            limit = steps if algorithm == "ssgd" else steps * hosts  # decentralized: batches over all hosts
            name = f"{algorithm}_{hosts}x{per_host}_{rate:g}mbit"
            timings, sent = bench.distributed(cluster, name, algorithm, per_host, f"train.max_steps={limit}")
            step = mean_step(timings)
            entry["runs"][f"{algorithm} {hosts}x{per_host}"] = {
                "step_s": step,
                "compute_s": compute,
                "step_over_compute": step / compute,
                "host0_sent_bytes": sent,
                "steps_by_learner": [t["steps"] for t in timings],
            }
            log.info(
                "%s at %g Mbit/s: %.3f s per step, %.2f x compute-only",
                f"{algorithm} {hosts}x{per_host}",
                rate,
                step,
                step / compute,
            )
    return entry


def measure_straggler(bench: Bench, cluster, rate: float) -> dict:
    out = {"rate_mbit": round(rate, 1), "utterances": bench.args.straggler_utts}
    one_epoch = ["train.epochs=1", f"train.max_train_utts={bench.args.straggler_utts}"]
    for algorithm in ("ssgd", "adpsgd"):
        runs = {}
        for slowed in (False, True):
            name = f"straggler_{algorithm}_{'slowed' if slowed else 'even'}_{rate:g}mbit"
            timings, _ = bench.distributed(
                cluster, name, algorithm, 1, *one_epoch, competitor_host=1 if slowed else None
            )
            runs[slowed] = timings
        even, slow = throughput(runs[False]), throughput(runs[True])
        out[algorithm] = {
            "utterances_per_s": even,
            "slowed_utterances_per_s": slow,
            "ratio": slow / even,
            "ideal": 0.5 if algorithm == "ssgd" else (cluster.nodes - 0.5) / cluster.nodes,
            "steps_by_learner_slowed": [t["steps"] for t in runs[True]],
        }
        log.info(
            "straggler at %g Mbit/s, %s: %.2f -> %.2f utterances/s (ratio %.3f)",
            rate,
            algorithm,
            even,
            slow,
            slow / even,
        )
    return out


def plot(report: dict, path: Path) -> None:
    fig = Figure(figsize=(10, 4), dpi=100)
    ax = fig.add_subplot(1, 2, 1)
    names = sorted({name for link in report["links"] for name in link["runs"]})
    width = 0.8 / max(1, len(report["links"]))
    for i, link in enumerate(report["links"]):
        values = [link["runs"].get(n, {}).get("step_over_compute", 0) for n in names]
        ax.bar([x + i * width for x in range(len(names))], values, width, label=f"{link['rate_mbit']:g} Mbit/s")
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks([x + width * (len(report["links"]) - 1) / 2 for x in range(len(names))], names, rotation=20)
    ax.set_ylabel("step time / compute-only step")
    ax.set_title("communication hidden (1.0) or exposed")
    ax.legend(fontsize=8)
    ax = fig.add_subplot(1, 2, 2)
    algorithms = ["ssgd", "adpsgd"]
    entries = report.get("straggler") or []
    width = 0.8 / max(1, len(entries))
    for i, entry in enumerate(entries):
        xs = [x + i * width for x in range(len(algorithms))]
        ax.bar(xs, [entry[a]["ratio"] for a in algorithms], width, label=f"{entry['rate_mbit']:g} Mbit/s")
        ax.scatter(
            xs,
            [entry[a]["ideal"] for a in algorithms],
            color="k",
            zorder=3,
            label="ideal" if i == 0 else None,
            marker="_",
            s=200,
        )
    ax.set_xticks([x + width * (len(entries) - 1) / 2 for x in range(len(algorithms))], algorithms)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("epoch throughput, one learner at half speed / even")
    ax.set_title("a slow learner")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.bench cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--recipe-dir", type=Path, default=Path("recipes/mini"), help="where the recipe's data, feats and lang are"
    )
    parser.add_argument("--steps", type=int, default=30, help="steps per learner and run (default %(default)s)")
    parser.add_argument(
        "--frames", type=int, default=12000, help="padded frames per learner and step (default %(default)s)"
    )
    parser.add_argument(
        "--utts", type=int, default=1000, help="utterances per learner and step at most (default %(default)s)"
    )
    parser.add_argument("--rates", nargs="+", default=["auto"], help="link rates in Mbit/s (0: unlimited), or auto")
    parser.add_argument("--layouts", nargs="+", default=["2x1", "2x2"], help="hosts x learners per host")
    parser.add_argument(
        "--straggler-utts", type=int, default=2400, help="utterances in the straggler epoch (0: skip it)"
    )
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--keep", action="store_true", help="keep the runs' experiment dirs and logs")
    parser.add_argument("--out", type=Path, default=Path("exp/bench"))
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every training run (key=value)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s [%(name)s] %(message)s")
    ok, why = netns.available()
    if not ok:
        log.error("cluster benchmark: %s", why)
        return 2
    if len({parse_layout(t)[0] for t in args.layouts}) != 1:
        log.error("--layouts: every layout needs the same number of hosts (got %s)", " ".join(args.layouts))
        return 2
    start = time.time()
    report = run(args)
    report = {
        "benchmark": "cluster",
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "seconds": round(time.time() - start, 1),
    } | report
    write_text(args.out / "cluster.json", json.dumps(report, indent=1) + "\n")
    plot(report, args.out / "cluster.png")
    log.info("wrote %s and %s", args.out / "cluster.json", args.out / "cluster.png")
    return 0
