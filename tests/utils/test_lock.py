"""The lock's view of its holder: a holder killed but not yet reaped (a zombie) is gone."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from asr.utils.atomic import process_running
from asr.utils.errors import InputError
from asr.utils.lock import DirLock, process_start


def state_of(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_killed_holder_that_is_not_yet_reaped_no_longer_holds_the_lock(tmp_path, caplog):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        path = tmp_path / "train.lock"
        holder = dict(DirLock(path, "x").me, pid=child.pid, process_start=process_start(child.pid), job="")
        path.write_text(json.dumps(holder) + "\n")
        with pytest.raises(InputError, match=f"in use by pid {child.pid}"):
            DirLock(path, "training").acquire()
        child.kill()  # not waited for: it stays a zombie until the test reaps it
        deadline = time.monotonic() + 30
        while state_of(child.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert state_of(child.pid) == "Z"
        assert not process_running(child.pid)
        with caplog.at_level("WARNING"):
            lock = DirLock(path, "training").acquire()
        assert lock.held and f"pid {child.pid} is no longer running" in caplog.text
        lock.release()
    finally:
        child.kill()
        child.wait()


def test_a_live_process_is_running():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert process_running(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not process_running(child.pid)
