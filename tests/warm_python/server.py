"""The suite's fork server for `python -m MODULE` processes: run.sh's stages, torchrun's agents and
their learners (CONTRIBUTING.md, "Stages and torchrun's processes start warm").

Each of those, as a fresh interpreter, imports torch, hydra and the Kaldi bindings (1.5-3 CPU-s
on a 2-core test machine) before any work. A server imports them once; for each request
(client.py) it forks a child that takes on the request's working directory, environment,
arguments and standard streams and runs the module as `python -m` does. The toolkit's own
modules load fresh in every child. The server sends the client the child's pid and, when the
child has ended, its wait status; it kills a child whose client went away, and exits after
IDLE_S without requests.

Files beside the socket PATH: PATH.pid (the server), PATH.log (its output), PATH.failed (its
libraries failed to load: clients then start fresh), PATH.cpu (CPU seconds the server's loading
and each child took, a line each with the child's module, for tests/cpu_report.py), and child-of-CLIENT_PID (the pid of
the child running that client's command, while it runs).
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import struct
import sys
import time
from typing import NoReturn

# The heavy third-party libraries the stages import, and nothing of the toolkit's own.
PRELOAD = (
    "numpy",
    "torch",
    "torch._dynamo",  # torch.optim imports it on its first step: as dear as torch itself
    "torch.distributed.run",  # torchrun's agent
    "omegaconf",
    "hydra",
    "matplotlib",
    "matplotlib.figure",
    "kaldi_hmm_gmm",
    "kaldifst",
    "kaldiio",
    "sentencepiece",
    "soundfile",
)
IDLE_S = 120.0


def cpu_seconds(usage) -> float:
    return usage.ru_utime + usage.ru_stime


def preload(path: str) -> None:
    import gc
    import importlib
    import resource

    try:
        for name in PRELOAD:
            importlib.import_module(name)
    except BaseException:
        open(path + ".failed", "w").close()
        raise
    import torch

    # A fresh process starts from torch's default seed; keep that true if an import drew from it.
    torch.default_generator.set_state(torch.Generator().get_state())
    gc.freeze()  # no collection in a child walks (and so copies) the preloaded objects
    with open(path + ".cpu", "a") as f:
        f.write(f"{cpu_seconds(resource.getrusage(resource.RUSAGE_SELF)):.3f}\tserver\n")


def receive(conn: socket.socket) -> tuple[list[str], list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 5)  # stdin, stdout, stderr, 2 namespaces
    (size,) = struct.unpack("!I", data[:4])
    data = data[4:]
    while len(data) < size:
        more = conn.recv(size - len(data))
        if not more:
            raise ConnectionError("the client went away mid-request")
        data += more
    return data.decode("utf-8", "surrogateescape").split("\0"), fds


def serve(path: str) -> tuple[list[str], list[int]] | None:
    """Serve requests until idle. Returns None in the server, the request in a forked child."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    staging = f"{path}.{os.getpid()}"
    listener.bind(staging)
    listener.listen(64)
    os.rename(staging, path)  # clients see the socket once it is listening
    inode = os.stat(path).st_ino
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, ("listener", 0))
    children: dict[int, tuple[socket.socket, int]] = {}  # pid -> (its client's connection, pidfd)
    clients: dict[int, int] = {}  # pid -> its client's pid
    modules: dict[int, str] = {}  # pid -> the module it runs
    last = time.monotonic()
    while children or time.monotonic() - last < IDLE_S:
        for key, _ in selector.select(timeout=5.0):
            kind, pid = key.data
            if kind == "listener":
                conn, _ = listener.accept()
                try:
                    request, fds = receive(conn)
                    module = parse(request)[4][1]  # argv: -m MODULE ARGS...
                except (OSError, ValueError, IndexError, struct.error):
                    conn.close()
                    continue
                client = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    for other, pidfd in children.values():
                        other.close()
                        os.close(pidfd)
                    conn.close()
                    return request, fds
                for fd in fds:
                    os.close(fd)
                try:
                    conn.sendall(struct.pack("!i", pid))
                except OSError:
                    pass  # the client is gone: its end reads as closed, and the child is killed below
                write_child_pid(path, client, pid)
                children[pid] = (conn, os.pidfd_open(pid))
                clients[pid] = client
                modules[pid] = module
                selector.register(conn, selectors.EVENT_READ, ("client", pid))
                selector.register(children[pid][1], selectors.EVENT_READ, ("child", pid))
            elif kind == "client":  # a client never writes again: readable means it is gone
                if pid in children:  # not reaped earlier in this round
                    os.kill(pid, signal.SIGKILL)
                    selector.unregister(key.fileobj)
            elif pid in children:
                _, status, usage = os.wait4(pid, 0)
                conn, pidfd = children.pop(pid)
                try:
                    os.unlink(child_pid_file(path, clients.pop(pid)))
                except FileNotFoundError:
                    pass  # the folder went first
                with open(path + ".cpu", "a") as f:
                    f.write(f"{cpu_seconds(usage):.3f}\tchild\t{modules.pop(pid)}\n")
                try:
                    conn.sendall(struct.pack("!i", status))
                except OSError:
                    pass  # the client was killed
                for obj in (conn, pidfd):
                    try:
                        selector.unregister(obj)
                    except KeyError:
                        pass  # the client's end, after it went away
                conn.close()
                os.close(pidfd)
                last = time.monotonic()
    if os.stat(path).st_ino == inode:  # not a newer server's socket
        os.unlink(path)
    return None


def child_pid_file(path: str, client: int) -> str:
    return os.path.join(os.path.dirname(path), f"child-of-{client}")


def write_child_pid(path: str, client: int, child: int) -> None:
    """The process doing the work of client `client`, for a test that kills a learner it found
    by the client's environment (tests/fixtures/processes.py), as it would kill a fresh one."""
    staging = f"{child_pid_file(path, client)}.{os.getpid()}"
    with open(staging, "w") as f:
        f.write(str(child))
    os.rename(staging, child_pid_file(path, client))


def parse(request: list[str]) -> tuple[str, int, list[str], set[int], list[str], list[str]]:
    """client.py's request: (cwd, umask, the signals it ignores, its CPUs, argv, environment entries)."""
    nargs, rest = int(request[4]), request[5:]
    cpus = {int(cpu) for cpu in request[3].split(",")}
    return request[0], int(request[1]), request[2].split(), cpus, rest[:nargs], rest[nargs:]


def become(request: list[str], fds: list[int], base_path: list[str]) -> str:
    """Turn this forked child into the process the client asked for; returns the module to run."""
    cwd, umask, ignored, cpus, argv, env = parse(request)
    for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD):
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as Python sets it up, unless ignored
    for name in ignored:  # ignored in the client: inherited across exec by a fresh interpreter
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
        os.close(fd)
    enter_placement(fds[3:], cpus)
    os.chdir(cwd)  # after the mount namespace, which sets it to that namespace's root
    os.umask(umask)
    os.environ.clear()
    os.environ.update(entry.split("=", 1) for entry in env)
    sys.path[:] = base_path if sys.flags.safe_path else [os.getcwd(), *base_path]
    reopen_stdio(unbuffered=bool(os.environ.get("PYTHONUNBUFFERED")))
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    sys.orig_argv = [sys.executable, *argv]
    sys.argv = ["-m", *argv[2:]]  # argv: -m MODULE ARGS...; runpy puts the module's path first
    import types

    import numpy

    sys.modules["__main__"] = types.ModuleType("__main__")
    numpy.random.seed()  # a fresh process draws its own seed (the random module reseeds at fork)
    return argv[1]


def enter_placement(namespaces: list[int], cpus: set[int]) -> None:
    """The client's network and mount namespaces (client.ENTERED_SPACES, as `ip netns exec` gives
    them) where they are not the server's, and its CPUs (`taskset`'s). Entering a namespace needs
    the privileges that made it (root); torch's thread count stays the server's, which
    OMP_NUM_THREADS sets where the CPUs differ (client.served_here)."""
    for space, fd in zip(("net", "mnt"), namespaces, strict=True):
        if os.readlink(f"/proc/self/fd/{fd}") != os.readlink(f"/proc/self/ns/{space}"):
            import ctypes

            if ctypes.CDLL(None, use_errno=True).setns(fd, 0) != 0:
                error = ctypes.get_errno()
                raise OSError(error, f"cannot enter the client's {space} namespace: {os.strerror(error)}")
        os.close(fd)
    os.sched_setaffinity(0, cpus)


def reopen_stdio(unbuffered: bool) -> None:
    """The standard streams on the client's descriptors, buffered as a fresh interpreter's are."""
    import io

    def stream(fd: int, writing: bool, old) -> io.TextIOWrapper:
        raw = io.open(fd, "wb" if writing else "rb", buffering=0 if unbuffered and writing else -1, closefd=False)
        return io.TextIOWrapper(
            raw,
            encoding=old.encoding,
            errors=old.errors,
            line_buffering=writing and not unbuffered and (os.isatty(fd) or fd == 2),
            write_through=writing and unbuffered,
        )

    sys.stdin = sys.__stdin__ = stream(0, False, sys.__stdin__)
    sys.stdout = sys.__stdout__ = stream(1, True, sys.__stdout__)
    sys.stderr = sys.__stderr__ = stream(2, True, sys.__stderr__)


def run(module: str) -> NoReturn:
    """Run `module` as __main__ and end as the interpreter would, but without tearing down the
    server's libraries: finalizing them would copy nearly every page the fork shares (0.3 CPU-s)."""
    import atexit
    import runpy
    import threading

    code, signalled = 0, None
    try:
        runpy._run_module_as_main(module, alter_argv=True)
    except SystemExit as exit:
        code = exit_code(exit.code)
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        signalled = signal.SIGINT
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    threading._shutdown()  # as at exit: wait for non-daemon threads, then the atexit functions
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if signalled is not None:  # as the interpreter ends on an uncaught KeyboardInterrupt
        signal.signal(signalled, signal.SIG_DFL)
        os.kill(os.getpid(), signalled)
    os._exit(code)


def exit_code(code) -> int:
    """SystemExit's argument as the interpreter turns it into an exit status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except (OSError, ValueError):
        pass
    return 1


def main() -> None:
    path = sys.argv[1]
    base_path = sys.path if sys.flags.safe_path else sys.path[1:]  # without this script's folder
    preload(path)
    try:
        served = serve(path)
    except OSError:  # no socket there (a path over 107 bytes, say): clients start fresh from now on
        open(path + ".failed", "w").close()
        raise
    if served is not None:
        try:
            module = become(*served, base_path)
        except OSError as error:  # on the client's standard error, as the command's own failure
            print(f"tests/warm_python: {error}", file=sys.stderr, flush=True)
            os._exit(1)
        run(module)


if __name__ == "__main__":
    main()
