"""A stand-in SLURM for recipe tests: `sbatch`, `squeue`, `sacct`, `scancel`, `srun` and
`scontrol` scripts that run the jobs on this machine and record every call.

`install(bin_dir, state_dir)` writes the scripts; put bin_dir first on PATH. Each call is one
JSON line in state_dir/calls.jsonl ({"cmd": ..., "argv": [...], "job": id for sbatch}). A job
runs in a background process of its own, after its `--dependency=afterok:ID` jobs completed
(if one failed it is cancelled, as with --kill-on-invalid-dep=yes), array tasks one after
another, each with SLURM_JOB_ID, SLURM_ARRAY_TASK_ID, ... set and its output in --output
(%A, %a, %j, %x replaced). While a job waits or runs, squeue lists it; sacct reports each
task's state and exit code. FAKE_SLURM_FAIL="NAME:TASK" in sbatch's environment makes that
task of the job named NAME fail (exit 1) instead of running, as a lost node would. While a
file `hold` exists in state_dir, jobs stay pending (a full cluster).

    python fake_slurm.py sbatch|squeue|sacct|scancel|srun|scontrol ARGS...   (what the scripts run)
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sys
import time
from pathlib import Path

# subprocess is imported where a job starts: run.sh polls squeue several times a second, and each
# call is an interpreter: it and site took 15 of the call's 49 ms of CPU.

STATE_ENV = "FAKE_SLURM_DIR"
ACTIVE = ("PENDING", "RUNNING")


def install(bin_dir: Path, state_dir: Path) -> dict[str, str]:
    """The scripts in bin_dir; returns the environment entries the recipe needs."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    for name in ("sbatch", "squeue", "sacct", "scancel", "srun", "scontrol"):
        script = bin_dir / name
        # -I -S: the stand-in needs only the standard library, and starts in half the time
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "{Path(__file__).resolve()}" {name} "$@"\n')
        script.chmod(0o755)
    return {STATE_ENV: str(state_dir)}


def calls(state_dir: Path, cmd: str) -> list[dict]:
    path = state_dir / "calls.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return [c for c in map(json.loads, lines) if c["cmd"] == cmd]


def option(argv: list[str], name: str) -> str | None:
    """The value of `--name=value` (or `--name value`) in an sbatch command line, the last one."""
    value = None
    for i, word in enumerate(argv):
        if word.startswith(f"--{name}="):
            value = word.split("=", 1)[1]
        elif word == f"--{name}" and i + 1 < len(argv):
            value = argv[i + 1]
    return value


# ---------------------------------------------------------------------------- the commands

BOOLEAN_OPTIONS = {"--parsable", "--requeue", "--wait"}


def sbatch(state: Path, argv: list[str]) -> int:
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        takes_value = "=" not in argv[i] and argv[i] not in BOOLEAN_OPTIONS
        i += 2 if takes_value else 1
    script, args = argv[i], argv[i + 1 :]
    job = _next_id(state)
    array = option(argv, "array")
    first, _, last = (array or "").partition("-")
    meta = {
        "script": script,
        "args": args,
        "name": option(argv, "job-name") or Path(script).name,
        "tasks": list(range(int(first), int(last or first) + 1)) if array else [None],
        "after": [int(j) for j in re.findall(r"\d+", option(argv, "dependency") or "")],
        "output": option(argv, "output") or "slurm-%j.out",
        "chdir": option(argv, "chdir") or os.getcwd(),
        "nodes": int(option(argv, "nodes") or 1),
        "fail": os.environ.get("FAKE_SLURM_FAIL", ""),
    }
    job_dir = state / "jobs" / str(job)
    job_dir.mkdir(parents=True)
    (job_dir / "meta.json").write_text(json.dumps(meta))
    for task in meta["tasks"]:
        _set_state(state, job, task, "PENDING", 0)
    _record(state, "sbatch", argv, job=job)
    import subprocess

    subprocess.Popen(
        [sys.executable, __file__, "run", str(job)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=dict(os.environ, SLURM_SUBMIT_DIR=os.getcwd()),
    )
    print(job)
    return 0


def run(state: Path, job: int) -> int:
    """The job in the background: wait for its dependencies, then each task in turn."""
    meta = json.loads((state / "jobs" / str(job) / "meta.json").read_text())
    for other in meta["after"]:
        while any(s in ACTIVE for s, _ in _states(state, other).values()):
            time.sleep(0.05)
        if any(s != "COMPLETED" for s, _ in _states(state, other).values()):
            for task in meta["tasks"]:
                _set_state(state, job, task, "CANCELLED", 0)
            return 0
    while (state / "hold").exists():
        time.sleep(0.05)
    for task in meta["tasks"]:
        if _states(state, job)[_task_key(task)][0] != "PENDING":
            continue  # scancel'd
        _set_state(state, job, task, "RUNNING", 0)
        code = _run_task(meta, job, task)
        _set_state(state, job, task, "COMPLETED" if code == 0 else "FAILED", code)
    return 0


def _run_task(meta: dict, job: int, task: int | None) -> int:
    out = meta["output"].replace("%A", str(job)).replace("%j", str(job)).replace("%x", meta["name"])
    out = out.replace("%a", str(task) if task is not None else "4294967294")
    env = dict(
        os.environ,
        SLURM_JOB_ID=str(job),
        SLURM_JOB_NAME=meta["name"],
        SLURM_JOB_NODELIST="localhost",
        SLURM_JOB_NUM_NODES=str(meta["nodes"]),
    )
    if task is not None:
        env.update(SLURM_ARRAY_JOB_ID=str(job), SLURM_ARRAY_TASK_ID=str(task))
    out_path = Path(meta["chdir"], out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with open(out_path, "w") as log:
        if meta["fail"] == f"{meta['name']}:{task}":
            log.write(f"fake slurm: task {task} of job {job} lost its node (FAKE_SLURM_FAIL)\n")
            return 1
        import subprocess

        return subprocess.run(
            ["bash", meta["script"], *meta["args"]], cwd=meta["chdir"], env=env, stdout=log, stderr=subprocess.STDOUT
        ).returncode


def squeue(state: Path, argv: list[str]) -> int:
    _record(state, "squeue", argv)
    for job in _jobs(_short(argv, "-j")):
        for key, (s, _) in _states(state, job).items():
            if s in ACTIVE:
                print(f"{job}_{key}" if key != "-" else job)
    return 0


def sacct(state: Path, argv: list[str]) -> int:
    _record(state, "sacct", argv)
    for job in _jobs(_short(argv, "-j")):
        for key, (s, code) in _states(state, job).items():
            print(f"{job}_{key}|{s}|{code}:0" if key != "-" else f"{job}|{s}|{code}:0")
    return 0


def scancel(state: Path, argv: list[str]) -> int:
    _record(state, "scancel", argv)
    for job in _jobs(",".join(argv)):
        for key, (s, _) in _states(state, job).items():
            if s == "PENDING":
                _set_state(state, job, None if key == "-" else int(key), "CANCELLED", 0)
    return 0


def srun(state: Path, argv: list[str]) -> int:
    """One task here: the options go, the command runs."""
    _record(state, "srun", argv)
    while argv and argv[0].startswith("-"):
        argv = argv[1:]
    import subprocess

    return subprocess.run(argv).returncode


def scontrol(state: Path, argv: list[str]) -> int:
    _record(state, "scontrol", argv)
    if argv[:2] == ["show", "hostnames"]:
        print("localhost")
    return 0


# ---------------------------------------------------------------------------- state files


def _record(state: Path, cmd: str, argv: list[str], **extra) -> None:
    with open(state / "calls.jsonl", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(json.dumps({"cmd": cmd, "argv": argv, **extra}) + "\n")


def _next_id(state: Path) -> int:
    with open(state / "next_id", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        job = int(f.read() or 1000)
        f.seek(0)
        f.truncate()
        f.write(str(job + 1))
    return job


def _task_key(task: int | None) -> str:
    return "-" if task is None else str(task)


def _set_state(state: Path, job: int, task: int | None, value: str, code: int) -> None:
    path = state / "jobs" / str(job) / f"{_task_key(task)}.state"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{value} {code}")
    os.replace(tmp, path)


def _states(state: Path, job: int) -> dict[str, tuple[str, int]]:
    result = {}
    for path in (state / "jobs" / str(job)).glob("*.state"):
        value, code = path.read_text().split()
        result[path.stem] = (value, int(code))
    return dict(sorted(result.items(), key=lambda kv: -1 if kv[0] == "-" else int(kv[0])))


def _jobs(spec: str | None) -> list[int]:
    return [int(j) for j in re.findall(r"\d+", spec or "")]


def _short(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv and argv.index(flag) + 1 < len(argv) else None


COMMANDS = {"sbatch": sbatch, "squeue": squeue, "sacct": sacct, "scancel": scancel, "srun": srun, "scontrol": scontrol}

if __name__ == "__main__":
    state_dir = Path(os.environ[STATE_ENV])
    if sys.argv[1] == "run":
        sys.exit(run(state_dir, int(sys.argv[2])))
    sys.exit(COMMANDS[sys.argv[1]](state_dir, sys.argv[2:]))
