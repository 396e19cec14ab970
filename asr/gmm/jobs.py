"""Where the jobs of a GMM pass run (Kaldi's `$cmd JOB=1:$nj ...` of queue.pl / slurm.pl): each
pass maps one function over the shares (align and accumulate, tree or LDA statistics, decode),
and the driver sums what the jobs return.

  gmm.submit=local   `gmm.nj` worker processes here (spawned, one BLAS thread each)
  gmm.submit=slurm   one SLURM array a pass, a task per share, each its own job with its own
                     memory (`gmm.sbatch`: its sbatch options, e.g. --mem=4G): the task and its
                     result travel as files in the system's temporary dir, which must be on a
                     filesystem the nodes share (as Kaldi's exp/ is). The driver (this process)
                     waits as scripts/cmd.sh does: squeue until the array has left the queue, then
                     sacct for each task's state, every ASR_SLURM_POLL_S seconds (10).

    python -m asr.gmm.jobs RUN_DIR TASK     # what an array task runs: task.TASK.pkl -> result.TASK.pkl
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import pickle
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable

from asr.utils.atomic import atomic_path
from asr.utils.errors import InputError
from asr.utils.log import log_to_stderr
from asr.utils.pool import spawn_pool
from asr.utils.threads import BLAS_THREAD_VARIABLES, one_blas_thread_in_children

log = logging.getLogger("asr.gmm")

SLURM_TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL",
                  "DEADLINE", "PREEMPTED", "REVOKED"}  # fmt: skip


class Jobs:
    """`nj` worker processes (spawned, one BLAS thread each: the jobs are the parallelism)."""

    def __init__(self, nj: int):
        self.nj = nj
        self._stack = contextlib.ExitStack()
        self.pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> "Jobs":
        if self.nj > 1:
            self._stack.enter_context(one_blas_thread_in_children())
            self.pool = self._stack.enter_context(spawn_pool(self.nj))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.__exit__(*exc)  # an exception reaches the pool: its workers end at once

    def map(self, work: Callable, tasks: list, *args) -> list:
        if self.pool is None:
            return [work(task, *args) for task in tasks]
        futures = [self.pool.submit(work, task, *args) for task in tasks]
        for future in as_completed(futures):
            future.result()  # the first task that fails ends the pass now, not after the others
        return [f.result() for f in futures]


class SlurmJobs(Jobs):
    """Every map() one SLURM array: `work(task, *args)` pickled for each task into RUN_DIR, run
    by `python -m asr.gmm.jobs`, the results read back in task order (see the module's docstring)."""

    def __init__(self, root: Path, name: str, sbatch_options: list[str]):
        self.root, self.name, self.options = Path(root), name, list(sbatch_options)
        self.runs = 0

    def __enter__(self) -> "SlurmJobs":
        self.root.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.root, ignore_errors=True)  # not among the system's outputs

    def map(self, work: Callable, tasks: list, *args) -> list:
        if not tasks:
            return []
        run_dir = self.root / f"run{self.runs:03d}"
        self.runs += 1
        run_dir.mkdir()
        for i, task in enumerate(tasks):
            with atomic_path(run_dir / f"task.{i}.pkl") as tmp:
                tmp.write_bytes(pickle.dumps((work, task, args)))
        script = task_script(run_dir)
        job = submit_array(script, len(tasks), run_dir, self.name, self.options)
        log.info("%s: slurm array job %s, %d tasks of %s; logs in %s", self.name, job, len(tasks), work.__name__,
                 run_dir)  # fmt: skip
        wait_for_array(job, run_dir)
        results = [read_result(run_dir, i) for i in range(len(tasks))]
        shutil.rmtree(run_dir)
        return results


def make_jobs(gmm: Any, work_root: Path):
    """The jobs of a GMM stage as gmm.submit says; `work_root`: a dir of the system's temporary
    output where a SLURM array's files may go (removed at the end)."""
    if gmm.submit == "slurm":
        return SlurmJobs(Path(work_root) / "slurm.jobs", f"gmm.{Path(gmm.dir).name}", list(gmm.sbatch))
    return Jobs(gmm.nj)


def task_script(run_dir: Path) -> Path:
    """The array task: this interpreter, here, one BLAS thread, the task named by the array index."""
    script = run_dir / "task.sh"
    threads = " ".join(f"{name}=1" for name in BLAS_THREAD_VARIABLES)
    script.write_text(
        "#!/usr/bin/env bash\nset -euo pipefail\n"
        f"cd {shlex.quote(os.getcwd())}\n"
        f"export {threads}\n"
        f'exec {shlex.quote(sys.executable)} -m asr.gmm.jobs {shlex.quote(str(run_dir))} "$SLURM_ARRAY_TASK_ID"\n'
    )
    script.chmod(0o755)
    return script


def submit_array(script: Path, tasks: int, run_dir: Path, name: str, options: list[str]) -> str:
    command = ["sbatch", "--parsable", f"--chdir={os.getcwd()}", *options, f"--job-name={name}",
               f"--array=0-{tasks - 1}", f"--output={run_dir}/%a.log", str(script)]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise InputError("gmm.submit=slurm: sbatch not found on PATH (run on a SLURM submit host)") from None
    if done.returncode != 0:
        why = done.stderr.strip()
        raise InputError(f"gmm.submit=slurm: {shlex.join(command)} failed (exit {done.returncode}): {why}")
    return done.stdout.strip().split(";")[0]  # --parsable: `id` or `id;cluster`


def wait_for_array(job: str, run_dir: Path) -> None:
    """Until every task has ended; a task that did not complete is an error naming its log."""
    poll, sacct_failures = float(os.environ.get("ASR_SLURM_POLL_S", "10")), 0
    while True:
        queued = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i"], capture_output=True, text=True)
        if not queued.stdout.strip():  # left the queue: sacct says how each task ended (it may lag behind)
            states = subprocess.run(
                ["sacct", "-n", "-P", "-X", "-j", job, "--format=JobID,State,ExitCode"], capture_output=True, text=True
            )
            if states.returncode != 0:
                sacct_failures += 1
                if sacct_failures >= 10:
                    raise InputError(f"sacct -j {job} failed 10 times; gmm.submit=slurm needs SLURM accounting")
            else:
                lines = [line.split("|") for line in states.stdout.splitlines() if line.strip()]
                if lines and all(state.split()[0] in SLURM_TERMINAL for _, state, _ in lines):
                    break
        time.sleep(poll)
    for task_id, state, code in sorted(lines, key=lambda line: line[0]):
        if state.split()[0] != "COMPLETED":
            task = task_id.removeprefix(job).lstrip("_")
            raise InputError(f"slurm job {task_id} {state.split()[0]} (exit {code}); its log: {run_dir}/{task}.log")


def read_result(run_dir: Path, index: int) -> Any:
    path = run_dir / f"result.{index}.pkl"
    if not path.is_file():
        raise InputError(f"{path}: missing, though its task completed; its log: {run_dir}/{index}.log")
    return pickle.loads(path.read_bytes())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m asr.gmm.jobs", description="One task of a GMM pass's SLURM array (what task.sh runs)."
    )
    parser.add_argument("run_dir", type=Path, help="the array's dir: task.TASK.pkl in, result.TASK.pkl out")
    parser.add_argument("task", type=int, help="the task's index ($SLURM_ARRAY_TASK_ID)")
    args = parser.parse_args(argv)
    work, task, work_args = pickle.loads((args.run_dir / f"task.{args.task}.pkl").read_bytes())
    log_to_stderr()
    result = work(task, *work_args)
    with atomic_path(args.run_dir / f"result.{args.task}.pkl") as tmp:
        tmp.write_bytes(pickle.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
