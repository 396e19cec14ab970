"""`python -I -S client.py [-u] -m MODULE ARGS...`: `python [-u] -m MODULE ARGS...` through the
suite's fork server (see server.py), run by the `python` and `torchrun` stand-ins beside it (for
run.sh and the cluster benchmark) and by the torchrun tests for the agent and its learners
(tests/distributed/conftest.py). It imports only built-in modules, so it starts in about 10 ms.
It hands the command and its standard streams to the server for this environment, forwards the
signals it gets to the child and ends as the child ended. Where no server serves this
environment yet, it starts one and runs the command itself in a fresh interpreter, as without
the server.
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
ENTERED_SPACES = ("net", "mnt")  # the child enters the client's: its descriptors go with the request


def client_command() -> list:
    """The start of a command line that runs `-m MODULE ARGS...` through this client."""
    return [sys.executable, "-I", "-S", os.path.abspath(__file__)]


def placement() -> str:
    """The namespaces (pid, ipc, uts, user) a forked child of a server keeps from the server, and
    this process's CPUs ("" where they cannot be read). A child enters its client's network and
    mount namespaces and takes its CPUs (server.py: `enter_placement`): `ip netns exec` and
    `taskset` reach it."""
    try:
        spaces = [os.readlink(f"/proc/self/ns/{space}") for space in ("pid", "ipc", "uts", "user")]
    except OSError:
        return ""
    return " ".join([*spaces, f"cpus:{cpu_list()}"])


def cpu_list() -> str:
    """This process's CPUs, as `0,1`."""
    return ",".join(map(str, sorted(os.sched_getaffinity(0))))


def served_here() -> bool:
    """Whether a server's child can stand in for this process: one of pytest's processes
    (ASR_WARM_PLACEMENT) or one started from it in other network or mount namespaces or on other
    CPUs. On other CPUs only where OMP_NUM_THREADS is set: without it torch and OpenBLAS size
    their thread pools by the CPUs of the process that imported them, the server."""
    here, home = placement(), os.environ.get("ASR_WARM_PLACEMENT", "")
    spaces, _, cpus = here.rpartition(" ")
    home_spaces, _, home_cpus = home.rpartition(" ")
    return bool(here) and spaces == home_spaces and (cpus == home_cpus or "OMP_NUM_THREADS" in os.environ)


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
    request = encode([os.getcwd(), str(umask), " ".join(ignored), cpu_list(), str(len(argv)), *argv, *env])
    spaces = [os.open(f"/proc/self/ns/{space}", os.O_RDONLY) for space in ENTERED_SPACES]
    fds = _struct.pack(f"{3 + len(spaces)}i", 0, 1, 2, *spaces)
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
    if "ASR_WARM_DIR" not in os.environ or not served_here():
        os.execv(python, [python, *argv])  # no servers, or in another PID namespace (say) than pytest
    path = socket_path(python)
    conn = connect(path)
    if conn is None:
        start_server(python, path)
        os.execv(python, [python, *argv])
    if argv[:1] == ["-u"]:  # torchrun's learners: `python -u -m MODULE ...`
        os.environ["PYTHONUNBUFFERED"] = "1"
        argv = argv[1:]
    run_warm(conn, argv)


if __name__ == "__main__":
    main()
