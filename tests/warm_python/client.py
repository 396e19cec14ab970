"""`python -I -S client.py -m MODULE ARGS...`: `python -m MODULE ARGS...` through the suite's fork
server (see server.py), run by the `python` and `torchrun` stand-ins beside it for run.sh and by
the torchrun tests for the agent and its learners (tests/distributed/conftest.py). It imports
only built-in modules, so it starts in about 10 ms. It hands the command and its standard
streams to the server for this environment, forwards the signals it gets to the child and ends
as the child ended. Where no server serves this environment yet, it starts one and runs the
command itself in a fresh interpreter, as without the server.
"""

import _signal
import _socket
import _struct
import fcntl
import os
import sys
import zlib

# Variables read by the interpreter at its start or by the server's libraries as they load: a
# request whose values differ needs a server started with its values. Those torch reads only at
# run time, which torchrun sets for its learners (TORCHELASTIC_* differ for each), do not count.
STARTUP_PREFIXES = (
    "PYTHON", "OMP_", "KMP_", "GOMP_", "MKL_", "ONEDNN_", "DNNL_", "ATEN_", "TORCH", "PYTORCH_",
    "CUDA_", "NCCL_", "LD_", "MALLOC_", "OPENBLAS_", "MPL", "LANG", "LC_",
)  # fmt: skip
APPLIED_BY_CHILD = ("PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE")  # the child sets these itself
RUN_TIME_ONLY = ("TORCHELASTIC_", "TORCH_NCCL_", "TORCHINDUCTOR_CACHE_DIR")
FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")


def client_command() -> list:
    """The start of a command line that runs `-m MODULE ARGS...` through this client."""
    return [sys.executable, "-I", "-S", os.path.abspath(__file__)]


def placement() -> str:
    """The namespaces (network, mounts, ...) and CPUs this process runs in, which a forked child
    of a server keeps from the server, not from its client ("" where they cannot be read)."""
    try:
        spaces = [os.readlink(f"/proc/self/ns/{space}") for space in ("net", "mnt", "pid", "ipc", "uts", "user")]
    except OSError:
        return ""
    return " ".join([*spaces, f"cpus:{sorted(os.sched_getaffinity(0))}"])


def startup_variables() -> dict:
    return {
        key: value
        for key, value in os.environ.items()
        if key.startswith(STARTUP_PREFIXES) and key not in APPLIED_BY_CHILD and not key.startswith(RUN_TIME_ONLY)
    }


def socket_path(python: str) -> str:
    startup = sorted(f"{key}={value}" for key, value in startup_variables().items())
    key = zlib.crc32("\0".join([python, *startup]).encode())
    return os.path.join(os.environ["ASR_WARM_DIR"], f"{key:08x}.sock")


def connect(path: str):
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        return None
    return conn


def start_server(python: str, path: str) -> None:
    """Start a server for this environment unless one is starting or serving, or failed to start."""
    if os.path.exists(path + ".failed"):
        return
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(path + ".pid") as f:
                os.kill(int(f.read()), 0)
            return  # alive: starting (a connect failed because it is not listening yet)
        except (OSError, ValueError):
            pass
        import subprocess  # only here: it costs the client more than all else together

        with open(path + ".log", "ab") as log:
            server = subprocess.Popen(
                [python, os.path.join(os.path.dirname(__file__), "server.py"), path],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env=server_environment(),
            )
        with open(path + ".pid", "w") as f:
            f.write(str(server.pid))


def server_environment() -> dict:
    """The startup variables and the basics, without this command's own (a learner's RANK, a
    test's ASR_TEST_JOB): /proc/PID/environ of the server and of every child shows the server's
    start, and tests find a learner to kill by its environment (tests/fixtures/processes.py)."""
    basics = {key: os.environ[key] for key in ("PATH", "HOME", "TMPDIR", "USER") if key in os.environ}
    return {**basics, **startup_variables()}


def stop_servers(folder: str) -> None:
    """SIGTERM to the servers in `folder` still running (a pid file outlives its server, and the
    pid may be another process's by now)."""
    for name in os.listdir(folder):
        if not name.endswith(".pid"):
            continue
        try:
            with open(os.path.join(folder, name)) as f:
                pid = int(f.read())
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"warm_python/server.py" in f.read():
                    os.kill(pid, _signal.SIGTERM)
        except (OSError, ValueError):
            pass  # gone already (idle)


def encode(strings: list) -> bytes:
    return "\0".join(strings).encode("utf-8", "surrogateescape")


def run_warm(conn, argv: list) -> None:
    umask = os.umask(0)
    os.umask(umask)
    env = [f"{key}={value}" for key, value in os.environ.items()]
    ignored = [name for name in FORWARDED if _signal.getsignal(getattr(_signal, name)) == _signal.SIG_IGN]
    request = encode([os.getcwd(), str(umask), " ".join(ignored), str(len(argv)), *argv, *env])
    fds = _struct.pack("3i", 0, 1, 2)
    conn.sendmsg([_struct.pack("!I", len(request)) + request], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
    (pid,) = _struct.unpack("!i", receive_exactly(conn, 4))
    for name in FORWARDED:
        if name not in ignored:  # an ignored signal stays ignored, in the child too
            _signal.signal(getattr(_signal, name), lambda number, frame: forward(pid, number))
    (status,) = _struct.unpack("!i", receive_exactly(conn, 4))
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        _signal.signal(number, _signal.SIG_DFL)
        os.kill(os.getpid(), number)
    # At once: the interpreter's teardown would put back the default action of the signals it
    # forwards, and a SIGTERM then (torchrun's, to the learners left once the first has exited)
    # would end this process as the child never did.
    os._exit(os.waitstatus_to_exitcode(status))


def forward(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:
        pass  # it has ended: its status is on the way


def receive_exactly(conn, size: int) -> bytes:
    data = b""
    while len(data) < size:
        more = conn.recv(size - len(data))
        if not more:
            sys.exit("tests/warm_python: the fork server went away")
        data += more
    return data


def main() -> None:
    python = sys.executable
    argv = sys.argv[1:]
    if "ASR_WARM_DIR" not in os.environ or placement() != os.environ.get("ASR_WARM_PLACEMENT"):
        os.execv(python, [python, *argv])  # no servers, or in another namespace (say) than pytest
    path = socket_path(python)
    conn = connect(path)
    if conn is None:
        start_server(python, path)
        os.execv(python, [python, *argv])
    run_warm(conn, argv)


if __name__ == "__main__":
    main()
