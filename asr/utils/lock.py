"""One run at a time in a directory: a lock file naming its holder.

`<dir>/<name>.lock` is created exclusively (O_EXCL) and holds the holder's host, pid, the
process's start time (so a recycled pid is not taken for the holder) and its job (torchrun's
run id, else SLURM's job id). A second run is refused with one line naming the holder. A lock
left by a process that is gone (same host, pid no longer running) is taken over with a warning,
and so is one of the same job: a learner that torchrun restarted, or a SLURM job requeued,
possibly on another host. A lock from another host cannot be checked: the message says to
delete it once that run is known to be over.
"""

from __future__ import annotations

import json
import logging
import os
import time
from datetime import datetime, timezone
from pathlib import Path

from asr.utils.atomic import HOST, process_running
from asr.utils.errors import InputError

log = logging.getLogger("asr.lock")


def process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux), '' where unknown."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def current_job() -> str:
    return os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("SLURM_JOB_ID") or ""


class DirLock:
    def __init__(self, path: str | os.PathLike, what: str):
        self.path = Path(path)
        self.what = what  # for messages: "training of exp/x"
        self.me = {
            "host": HOST,
            "pid": os.getpid(),
            "process_start": process_start(os.getpid()),
            "started": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "job": current_job(),
        }
        self.held = False

    def holder(self) -> dict | None:
        """The lock's content; None if there is none. A file still being written (empty or
        cut short) is read again for a moment before it is taken as left by a dead writer."""
        for _ in range(20):
            try:
                return json.loads(self.path.read_text())
            except FileNotFoundError:
                return None
            except (OSError, ValueError):
                time.sleep(0.05)
        return {}

    def stale(self, holder: dict) -> str:
        """Why the holder is gone ('' if it may be running)."""
        if not holder:
            return "unreadable"
        if holder.get("host") == HOST and holder.get("pid") == self.me["pid"]:
            return "this process"
        if self.me["job"] and holder.get("job") == self.me["job"]:
            return f"an earlier attempt of this job ({self.me['job']})"
        if holder.get("host") != HOST:
            return ""
        pid = int(holder.get("pid", 0))
        if pid <= 0 or not process_running(pid):
            return f"pid {pid} is no longer running"
        if holder.get("process_start") and process_start(pid) not in ("", holder["process_start"]):
            return f"pid {pid} now belongs to another process"
        return ""

    def acquire(self) -> "DirLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(5):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self.holder()
                if holder is None:
                    continue  # released meanwhile
                why = self.stale(holder)
                if not why:
                    raise InputError(
                        f"{self.path}: the {self.what} is in use by pid {holder.get('pid')} on {holder.get('host')} "
                        f"(since {holder.get('started')}); wait for it or stop it, or use another exp_name "
                        f"(if that run is over, delete {self.path.name})"
                    )
                if why != "this process":
                    log.warning(
                        "%s: taking over the lock of pid %s on %s (since %s): %s",
                        self.path,
                        holder.get("pid"),
                        holder.get("host"),
                        holder.get("started"),
                        why,
                    )
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(self.me) + "\n")
            self.held = True
            return self
        raise InputError(f"{self.path}: could not take the lock (other runs starting at the same time?); try again")

    def release(self) -> None:
        """Remove the lock if it is still this process's."""
        if not self.held:
            return
        self.held = False
        holder = self.holder()
        if holder and holder.get("host") == HOST and holder.get("pid") == self.me["pid"]:
            self.path.unlink(missing_ok=True)
