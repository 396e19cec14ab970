"""Small multi-process jobs around the real updaters, for the shutdown and timeout tests.

    python learner_jobs.py '[JSON_SPEC, ...]'

A spec says how many learners, which algorithm, how many steps (or a `plan` of batches that
the nodes claim first come first served, as the trainer does), and optionally which
learner freezes (SIGSTOP, a process that stops answering) at which step, or takes no step
at all (as one that claims no batch of the epoch); specs with the same `together` name run
side by side. The driver imports torch once and forks one child per learner (no threads exist
before the fork), so a job costs a fraction of a second and can be repeated; each child joins a
gloo process group, trains a small regression model with the real Updater, then closes and
exits through the normal interpreter shutdown, where an unclean exit would abort. The driver
prints one JSON line per job: its name, and each learner's exit status, stderr and report.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist

from asr.distributed.build import build_training_updater  # imported before forking
from asr.distributed.claims import BatchClaims, claims_store
from asr.distributed.context import DistributedError, fail_fast, init_distributed

# The first optimizer imports torch's compiler machinery (seconds): once, before forking.
torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
# What the children inherit is left out of the final garbage collection of their exit (3x
# faster); what a child creates itself (process groups, threads, updaters) is still
# collected and finalized at its exit, which is what the shutdown test checks.
gc.freeze()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config(spec: dict) -> SimpleNamespace:
    train = SimpleNamespace(
        optimizer=spec.get("optimizer", "sgd"),
        lr=0.05,
        momentum=0.9,
        weight_decay=0.0,
        warmup_steps=0,
        lr_decay=1.0,
        grad_clip=0.0,
        max_frames=1,
        lr_scaling="none",
        lr_reference_frames=0,
    )
    distributed = SimpleNamespace(
        algorithm=spec["algorithm"],
        backend="gloo",
        learners_per_node=spec.get("per_node", 0),
        timeout_s=spec.get("timeout_s", 30.0),
        bucket_cap_mb=25.0,
        restart_from_average=False,
        topology=spec.get("topology", "ring"),
        delay_by_one=spec.get("delay_by_one", False),
    )
    return SimpleNamespace(train=train, distributed=distributed, device="cpu", seed=spec.get("seed", 1))


def learner(spec: dict, rank: int, out: Path) -> None:
    """One learner: its own data, the real updater, clean close."""
    torch.set_num_threads(1)
    cfg = config(spec)
    t = time.monotonic()
    ctx = init_distributed(cfg)
    report_init = time.monotonic() - t
    torch.manual_seed(rank if spec.get("own_start") else 0)  # own_start: every learner its own weights
    model = torch.nn.Linear(8, 4)
    updater = build_training_updater(model, cfg, ctx)
    net = updater.wrap(model)  # DDP under SSGD
    target = torch.randn(8, 4, generator=torch.Generator().manual_seed(99))  # one problem...
    gen = torch.Generator().manual_seed(100 + rank)  # ...each learner its own samples
    initial = [float(v) for v in torch.cat([p.detach().reshape(-1) for p in model.parameters()])]
    t0 = time.monotonic()
    report = {"rank": rank, "init_s": report_init, "build_s": time.monotonic() - t}
    try:
        if spec.get("plan"):
            report["claimed"] = train_claimed(spec, updater, net, target, ctx)
        for step in range(0 if rank == spec.get("idle_rank", -1) or spec.get("plan") else spec["steps"]):
            if rank == spec.get("freeze_rank", -1) and step == spec.get("freeze_step", -1):
                os.kill(os.getpid(), signal.SIGSTOP)
            updater.begin_step()
            x = torch.randn(16, 8, generator=gen)
            loss = (net(x) - x @ target).pow(2).mean()
            if spec.get("mix_only"):
                loss = loss * 0.0  # a zero gradient: the step only averages
            updater.step(loss, weight=16)
            if spec.get("trace"):
                report.setdefault("trace", []).append(flat(model))
            if spec.get("slow_rank", -1) == rank:
                time.sleep(spec.get("slow_s", 0.0))
        report["train_s"] = time.monotonic() - t0
        if spec.get("own_start"):
            report["initial"] = initial
            report["own"] = own_weights(updater, model)
        average = updater.average_for_epoch_end() if updater.decentralized else None
        report["spread"] = average.spread if average else 0.0
        report["moments"] = None if average is None or average.moments is None else [float(v) for v in average.moments]
        report["weights"] = [float(v) for v in average.weights] if average else flat(model)
        updater.close()
        report["exchanges"] = getattr(updater, "exchanges", 0)
    except DistributedError as err:
        (out / f"report.{rank}.json").write_text(json.dumps(report | {"error": str(err)}))
        fail_fast(err)
    ctx.close()
    (out / f"report.{rank}.json").write_text(json.dumps(report))


def train_claimed(spec: dict, updater, net, target, ctx) -> list[int]:
    """An epoch of `plan` batches claimed first come first served (the real BatchClaims on the
    job's store, shared inside a node); each learner's share of batch i is drawn from (i, its
    place in the node). Returns the batches this learner trained."""
    layout = updater.layout
    claims = BatchClaims(
        claims_store(),
        is_leader=layout.is_leader,
        leader=layout.leader_of(layout.node),
        control_group=updater.groups.node_claims,
        rank=ctx.rank,
        timeout_s=ctx.timeout_s,
    )
    claimed = []
    dist.barrier()  # every learner ready before the first claim, as after the trainer's start-up
    while (index := claims(spec["plan"])) is not None:
        gen = torch.Generator().manual_seed(1000 * index + layout.local_index)
        updater.begin_step()
        x = torch.randn(16, 8, generator=gen)
        loss = (net(x) - x @ target).pow(2).mean()
        updater.step(loss * 0.0 if spec.get("mix_only") else loss, weight=16)  # mix_only: the step only averages
        claimed.append(index)
        time.sleep(spec.get("pace_s", 0.0))  # a step's compute, so that start-up order does not decide the claims
    return claimed


def flat(model) -> list[float]:
    return [float(v) for v in torch.cat([p.detach().reshape(-1) for p in model.parameters()])]


def own_weights(updater, model) -> list[float]:
    """This learner's weights once every exchange has landed on both sides, as before the node
    checkpoints of a stop (the updater's settle)."""
    updater.settle("before reporting its own weights")
    return flat(model)


@dataclass
class Job:
    """One job's forked learners: pid -> rank, and where they write their reports and stderr."""

    spec: dict
    out: Path
    pids: dict[int, int]


def start_job(spec: dict) -> Job:
    """Fork the learners of `spec` on a port of its own."""
    out = Path(tempfile.mkdtemp(prefix="learners."))
    port = free_port()
    pids = {}
    for rank in range(spec["learners"]):
        pid = os.fork()
        if pid == 0:
            os.environ.update(
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                WORLD_SIZE=str(spec["learners"]),
                LOCAL_WORLD_SIZE=str(spec["learners"]),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
            )
            err = os.open(out / f"stderr.{rank}", os.O_WRONLY | os.O_CREAT)
            os.dup2(err, 2)
            learner(spec, rank, out)
            sys.exit(0)  # the normal interpreter exit: an unclean shutdown aborts here
        pids[pid] = rank
    return Job(spec, out, pids)


def wait_jobs(jobs: list[Job]) -> list[dict]:
    """Wait for every learner of the jobs (SIGKILL a job's frozen one once the rest of that job
    have exited); each job's learners' exit status, seconds since the start, stderr and report."""
    start = time.monotonic()
    job_of = {pid: job for job in jobs for pid in job.pids}
    status: dict[int, int] = {}
    seconds: dict[int, float] = {}
    while len(status) < len(job_of):
        pid, code = os.waitpid(-1, os.WNOHANG | os.WUNTRACED)
        if pid == 0:
            for job in jobs:
                kill_frozen_when_alone(job, status)
            time.sleep(0.05)
            continue
        if os.WIFSTOPPED(code):
            continue
        status[pid] = os.waitstatus_to_exitcode(code)
        seconds[pid] = round(time.monotonic() - start, 2)
    return [collect(job, status, seconds) for job in jobs]


def kill_frozen_when_alone(job: Job, status: dict[int, int]) -> None:
    frozen = job.spec.get("freeze_rank", -1)
    if frozen < 0:
        return
    victim = next(pid for pid, rank in job.pids.items() if rank == frozen)
    if victim not in status and all(pid in status for pid in job.pids if pid != victim):
        os.kill(victim, signal.SIGKILL)


def collect(job: Job, status: dict[int, int], seconds: dict[int, float]) -> dict:
    pid_of = {rank: pid for pid, rank in job.pids.items()}
    learners = []
    for rank in range(job.spec["learners"]):
        report_path = job.out / f"report.{rank}.json"
        report = json.loads(report_path.read_text()) if report_path.is_file() else {}
        pid = pid_of[rank]
        learners.append(
            report | {"exit": status[pid], "seconds": seconds[pid], "stderr": (job.out / f"stderr.{rank}").read_text()}
        )
    shutil.rmtree(job.out, ignore_errors=True)  # everything the test needs is in the returned reports
    return {"learners": learners}


def batches(specs: list[dict]) -> list[list[dict]]:
    """The jobs in order, each `repeat` times, one after the other; consecutive specs with the
    same `together` name start side by side (jobs that mostly wait out a timeout)."""
    out: list[list[dict]] = []
    for spec in specs:
        together = spec.get("together")
        if together and out and out[-1][0].get("together") == together:
            out[-1].append(spec)
        elif together:
            out.append([spec])
        else:
            out.extend([spec] for _ in range(spec.get("repeat", 1)))
    return out


def main() -> None:
    """Run the specs of the JSON list (see `batches`); one output line per job."""
    for batch in batches(json.loads(sys.argv[1])):
        for spec, result in zip(batch, wait_jobs([start_job(spec) for spec in batch])):
            print(json.dumps({"name": spec["name"]} | result), flush=True)


if __name__ == "__main__":
    main()
