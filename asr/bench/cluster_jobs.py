"""The cluster benchmark's training jobs: `python -m asr.train` learners, alone side by side
(compute only) or under `torchrun` across the emulated hosts (asr/bench/netns.py), each pinned
to its host's core, and the CPU-bound competitors that slow a host down. Every job writes its
learners' step times (timing/learner-<rank>.json), which is what comes back from here; and
the link probe (link_probe.py), which times one weight exchange on the link alone."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from asr.bench.netns import EmulatedCluster


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Launcher:
    """Starts the jobs of one benchmark run in `work`, with the recipe's data (`recipe_dir`),
    `utts` utterances per learner and step at most, and the user's Hydra `overrides`."""

    def __init__(self, work: Path, recipe_dir: Path, utts: int, overrides: list[str], timeout: float):
        self.work = work
        self.recipe_dir = recipe_dir
        self.utts = utts
        self.overrides = list(overrides)
        self.timeout = timeout
        self.cores = os.cpu_count() or 1
        self.python = sys.executable

    def core(self, host: int) -> str:
        return str(host % self.cores)

    def train_overrides(self, exp: Path, frames: int, *extra: str) -> list[str]:
        return [
            f"exp_dir={exp}",
            "train.threads=1",
            f"train.max_utts={self.utts}",
            f"train.max_frames={frames}",
            "train.checkpoint_every_steps=1000000",
            "train.log_every_steps=1000000",
            "train.precision=fp32",
            "train.plot=false",  # the loss curve is not what is timed, and matplotlib costs every learner CPU
            "device=cpu",
            *self.overrides,
            *extra,
        ]

    def env(self) -> dict:
        repo = str(Path(__file__).resolve().parents[2])
        env = dict(
            os.environ,
            OMP_NUM_THREADS="1",
            PYTHONPATH=os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])),
        )
        for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(key, None)
        return env

    def start(self, cmd: list[str], log: Path) -> subprocess.Popen:
        with open(log, "w") as out:
            return subprocess.Popen(cmd, cwd=self.recipe_dir, env=self.env(), stdout=out, stderr=subprocess.STDOUT)

    def wait(self, procs: list[subprocess.Popen], logs: list[Path], what: str) -> None:
        for proc in procs:
            proc.wait(timeout=self.timeout)
        failed = [i for i, p in enumerate(procs) if p.returncode != 0]
        if failed:
            tail = logs[failed[0]].read_text()[-3000:]
            raise RuntimeError(f"{what}: process(es) {failed} failed\n{tail}")

    def fresh_exp(self, name: str) -> Path:
        exp = self.work / name
        if exp.exists():  # a finished run would be skipped, and its old timings read as new ones
            raise RuntimeError(f"{exp}: two runs of one benchmark share an experiment name")
        return exp

    def compute_only(self, name: str, hosts: int, per_host: int, frames: int, steps: int) -> list[dict]:
        """Every learner alone (distributed=none), side by side on its host's core."""
        procs, logs, exps = [], [], []
        for learner in range(hosts * per_host):
            exps.append(self.fresh_exp(f"{name}_{learner}"))
            logs.append(exps[-1].with_suffix(".log"))
            overrides = self.train_overrides(exps[-1], frames, f"train.max_steps={steps}")
            cmd = ["taskset", "-c", self.core(learner // per_host), self.python, "-m", "asr.train", *overrides]
            procs.append(self.start(cmd, logs[-1]))
        self.wait(procs, logs, name)
        return [t for exp in exps for t in timings(exp)]

    def distributed(
        self,
        cluster: EmulatedCluster,
        name: str,
        per_host: int,
        frames: int,
        *extra: str,
        slowed_host: int | None = None,
    ) -> tuple[list[dict], int]:
        """One torchrun job over the hosts; (every learner's timing, bytes host 0 sent).
        `extra`: overrides (distributed=..., train.max_steps=...); `slowed_host`: a host whose
        core is shared with one competitor per learner for the whole job."""
        exp = self.fresh_exp(name)
        before = cluster.tx_bytes(0)
        with self.competitors(slowed_host, per_host):
            self.torchrun(cluster, name, per_host, ["asr.train", *self.train_overrides(exp, frames, *extra)])
        return timings(exp), cluster.tx_bytes(0) - before

    def exchange_alone(self, cluster: EmulatedCluster, name: str, per_host: int, parameters: int, rounds: int) -> dict:
        """`rounds` weight exchanges after a warm-up on the link as it is set now, with nothing
        else running: the probe's report (asr/bench/link_probe.py)."""
        out = self.work / f"{name}.json"
        probe = ["asr.bench.link_probe", f"--parameters={parameters}", f"--rounds={rounds + 1}", f"--out={out}"]
        self.torchrun(cluster, name, per_host, probe)
        return json.loads(out.read_text())

    def torchrun(self, cluster: EmulatedCluster, name: str, per_host: int, module: list[str]) -> None:
        """`python -m module...` as one torchrun job of `per_host` processes on every host,
        each host's pinned to its core; waits for it."""
        port, job = free_port(), uuid.uuid4().hex[:8]
        procs, logs = [], []
        for host in range(cluster.nodes):
            logs.append(self.work / f"{name}.host{host}.log")
            torchrun = [
                *(self.python, "-m", "torch.distributed.run", f"--nnodes={cluster.nodes}"),
                *(f"--node-rank={host}", f"--nproc-per-node={per_host}", "--rdzv-backend=c10d"),
                *(f"--rdzv-endpoint={cluster.address(0)}:{port}", f"--rdzv-id={job}"),
                *(f"--local-addr={cluster.address(host)}", f"--rdzv-conf=is_host={int(host == 0)}"),
                "-m",
                *module,
            ]
            pinned = ["taskset", "-c", self.core(host), "env", "GLOO_SOCKET_IFNAME=eth0", *torchrun]
            procs.append(self.start(cluster.command(host, pinned), logs[-1]))
        self.wait(procs, logs, name)

    @contextlib.contextmanager
    def competitors(self, host: int | None, count: int):
        """`count` CPU-bound processes on `host`'s core: beside as many learners, each of those
        gets half the share of the core it had alone (the scheduler is fair between them)."""
        if host is None:
            yield
            return
        busy = [self.python, "-c", "while True: pass"]
        procs = [subprocess.Popen(["taskset", "-c", self.core(host), *busy]) for _ in range(count)]
        try:
            time.sleep(0.5)
            yield
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()


def timings(exp: Path) -> list[dict]:
    """The learners' timing records of one job, in rank order."""
    found = (json.loads(p.read_text()) for p in (exp / "timing").glob("learner-*.json"))
    return sorted(found, key=lambda t: t["rank"])
