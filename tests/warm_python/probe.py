"""`python -m tests.warm_python.probe [COMMAND ARGS]`: what a process sees of its start, as JSON on
stdout, for tests/test_warm_python.py to compare a fork server's child with a fresh interpreter;
then COMMAND: exit CODE, sleep PIDFILE, ignore-term PIDFILE, raise, interrupt or message."""

import json
import os
import signal
import sys
import time


def main() -> None:
    print(
        json.dumps(
            {
                "argv": sys.argv[1:],
                "argv0": os.path.relpath(sys.argv[0]),
                "cwd": os.getcwd(),
                "path0": sys.path[0],
                "name": __name__,
                "env": os.environ.get("PROBE"),
                "stdin": sys.stdin.read() if "stdin" in sys.argv else None,
                "umask": os.umask(0o022),
                "stdout_line_buffering": sys.stdout.line_buffering,
                "sigterm": str(signal.getsignal(signal.SIGTERM)),
                "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
                "net": os.readlink("/proc/self/ns/net"),
                "mnt": os.readlink("/proc/self/ns/mnt"),
                "cpus": sorted(os.sched_getaffinity(0)),
            }
        ),
        flush=True,
    )
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "exit":
        sys.exit(int(sys.argv[2]))
    if command == "sleep":
        with open(sys.argv[2], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(60)
    if command == "ignore-term":  # as a learner that is stopping already (asr/utils/stop.py)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with open(sys.argv[2], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(0.3)
        sys.exit(75)
    if command == "raise":
        raise RuntimeError("probe failed")
    if command == "interrupt":
        raise KeyboardInterrupt
    if command == "message":
        sys.exit("probe: a message")


if __name__ == "__main__":
    main()
