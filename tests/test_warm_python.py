"""The recipe tests' fork server (tests/warm_python/): a stage run in a forked child of it sees what
it would see as a fresh interpreter, and ends as that interpreter would."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.warm_python import client
from tests.warm_python.client import client_command, placement, stop_servers

REPO = Path(__file__).resolve().parents[1]
PROBE = ["-m", "tests.warm_python.probe"]


@pytest.fixture(scope="module")
def folder():
    """A fork server of its own, started by a first request (which runs fresh) and then serving."""
    path = tempfile.mkdtemp(prefix="asr-warm-test-")
    first = run(path, "exit", "0")
    assert first.returncode == 0, first.stderr
    deadline = time.monotonic() + 120
    while not list(Path(path).glob("*.sock")):
        assert time.monotonic() < deadline, (Path(path) / os.listdir(path)[0]).read_text()
        time.sleep(0.2)
    yield path
    stop_servers(path)
    shutil.rmtree(path, ignore_errors=True)


def environment(folder: str | None, **extra: str) -> dict[str, str]:
    env = dict(os.environ, PROBE="seen", ASR_WARM_PLACEMENT=placement(), OMP_NUM_THREADS="1")
    env.pop("ASR_WARM_DIR", None)
    return dict(env, **extra) if folder is None else dict(env, ASR_WARM_DIR=folder, **extra)


def command(folder: str | None, *args: str) -> list[str]:
    """The probe through the client (with `folder`), or in a fresh interpreter (None)."""
    start = [sys.executable] if folder is None else client_command()
    return [*start, *PROBE, *args]


def run(
    folder: str | None, *args: str, stdin: str = "", launcher: tuple[str, ...] = (), **extra: str
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*launcher, *command(folder, *args)],
        cwd=REPO,
        env=environment(folder, **extra),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def served_children(folder: str) -> int:
    return sum("\tchild\t" in line for log in Path(folder).glob("*.cpu") for line in open(log))


def test_a_child_sees_what_a_fresh_interpreter_sees(folder):
    before = served_children(folder)
    warm = run(folder, "stdin", "two words", stdin="from the pipe\n")
    cold = run(None, "stdin", "two words", stdin="from the pipe\n")
    assert served_children(folder) == before + 1  # the server ran it, not a fresh interpreter
    assert (warm.returncode, warm.stderr) == (cold.returncode, cold.stderr) == (0, "")
    seen = json.loads(warm.stdout)
    assert seen == json.loads(cold.stdout)
    assert seen["argv"] == ["stdin", "two words"] and seen["stdin"] == "from the pipe\n"
    assert seen["path0"] == str(REPO) and seen["name"] == "__main__" and seen["env"] == "seen"


@pytest.mark.parametrize(
    "args, status, stderr",
    [
        (("exit", "3"), 3, ""),
        (("message",), 1, "probe: a message\n"),
        (("raise",), 1, "RuntimeError: probe failed\n"),
        (("interrupt",), -signal.SIGINT, "KeyboardInterrupt\n"),
    ],
)
def test_a_child_ends_as_a_fresh_interpreter_ends(folder, args, status, stderr):
    warm, cold = run(folder, *args), run(None, *args)
    assert warm.returncode == cold.returncode == status
    assert warm.stderr.endswith(stderr) and cold.stderr.endswith(stderr)


def test_a_signal_to_the_client_reaches_the_child(folder, tmp_path):
    pid_file = tmp_path / "pid"
    client = subprocess.Popen(command(folder, "sleep", str(pid_file)), cwd=REPO, env=environment(folder))
    child = wait_for_pid(pid_file)
    assert child != client.pid
    assert (Path(folder) / f"child-of-{client.pid}").read_text() == str(child)  # for tests that kill it
    client.send_signal(signal.SIGTERM)
    assert client.wait(timeout=30) == -signal.SIGTERM
    assert not alive(child)


def test_a_signal_the_child_ignores_while_it_exits_leaves_its_status(folder, tmp_path):
    """torchrun sends SIGTERM to the learners left once the first has exited; one that is stopping
    ignores it (asr/utils/stop.py), and so must its client, up to its very end."""
    pid_file = tmp_path / "pid"
    client = subprocess.Popen(command(folder, "ignore-term", str(pid_file)), cwd=REPO, env=environment(folder))
    wait_for_pid(pid_file)
    while client.poll() is None:
        client.send_signal(signal.SIGTERM)
        time.sleep(0.0005)
    assert client.returncode == 75


def test_a_killed_client_takes_its_child_with_it(folder, tmp_path):
    pid_file = tmp_path / "pid"
    client = subprocess.Popen(command(folder, "sleep", str(pid_file)), cwd=REPO, env=environment(folder))
    child = wait_for_pid(pid_file)
    client.kill()
    client.wait(timeout=30)
    deadline = time.monotonic() + 30
    while alive(child):
        assert time.monotonic() < deadline, "the child outlived its client"
        time.sleep(0.05)


def test_another_startup_environment_is_not_served_by_this_server(folder):
    before = served_children(folder)
    other = run(folder, "exit", "0", OMP_NUM_THREADS="7")  # read as torch loads: a server of its own
    assert other.returncode == 0
    assert served_children(folder) == before


def test_a_client_in_another_placement_starts_fresh(folder):
    before = served_children(folder)
    elsewhere = run(folder, "exit", "0", ASR_WARM_PLACEMENT="pid:[another namespace]")
    assert elsewhere.returncode == 0
    assert served_children(folder) == before


def test_a_client_on_other_cpus_is_served_on_them(folder):
    """`taskset` (the cluster benchmark's learners) reaches the child."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("one CPU: no other CPUs to pin a client to")
    before = served_children(folder)
    pinned = run(folder, launcher=("taskset", "-c", str(cpus[-1])))
    assert pinned.returncode == 0, pinned.stderr
    assert served_children(folder) == before + 1
    assert json.loads(pinned.stdout)["cpus"] == [cpus[-1]]


def test_other_cpus_are_served_only_where_omp_num_threads_sizes_the_thread_pools(monkeypatch):
    """torch and OpenBLAS size their thread pools by the CPUs of the process that imports them."""
    home = "pid:[1] ipc:[2] uts:[3] user:[4] cpus:0,1"
    monkeypatch.setenv("ASR_WARM_PLACEMENT", home)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(client, "placement", lambda: home.replace("0,1", "1"))
    assert client.served_here()
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert not client.served_here()
    monkeypatch.setattr(client, "placement", lambda: home.replace("pid:[1]", "pid:[5]"))
    assert not client.served_here()
    monkeypatch.setattr(client, "placement", lambda: "")  # unreadable
    assert not client.served_here()


def test_a_client_in_other_network_and_mount_namespaces_is_served_in_them(folder):
    """`ip netns exec` (the two-host test, the cluster benchmark) reaches the child."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "--net", "--mount", "true"]).returncode:
        pytest.skip("cannot make network and mount namespaces here (root needed)")
    before = served_children(folder)
    inside = ["unshare", "--net", "--mount", "sh", "-c", 'readlink /proc/self/ns/net /proc/self/ns/mnt; exec "$@"', "-"]
    moved = run(folder, launcher=tuple(inside))
    assert moved.returncode == 0, moved.stderr
    assert served_children(folder) == before + 1
    net, mnt, seen = moved.stdout.splitlines()
    assert (json.loads(seen)["net"], json.loads(seen)["mnt"]) == (net, mnt)
    assert net != os.readlink("/proc/self/ns/net") and mnt != os.readlink("/proc/self/ns/mnt")


def test_a_server_that_cannot_listen_leaves_every_client_fresh():
    folder = tempfile.mkdtemp(prefix="asr-warm-test-")
    long = Path(folder) / ("x" * 100)  # a socket's path has at most 107 bytes
    long.mkdir()
    try:
        assert run(str(long), "exit", "0").returncode == 0  # starts the server, runs fresh
        deadline = time.monotonic() + 120
        while not list(long.glob("*.failed")):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        started = (next(long.glob("*.pid"))).read_text()
        assert run(str(long), "exit", "3").returncode == 3
        assert next(long.glob("*.pid")).read_text() == started  # no second server tried
    finally:
        stop_servers(str(long))
        shutil.rmtree(folder, ignore_errors=True)


def wait_for_pid(pid_file: Path) -> int:
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return int(pid_file.read_text())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
