"""A stop request from outside (preemption): SIGTERM, or SIGUSR1 (SLURM's `--signal`).

SLURM sends SIGTERM some seconds before it kills a job, and with `--signal=USR1@<s>` a
SIGUSR1 earlier still. A training that catches either finishes its current step, saves an
exact checkpoint and exits with EXIT_PREEMPTED, so the job can be requeued and the same command
goes on from there (asr/train/loop.py). The handler only sets a flag: the loop decides where
to stop, at a step boundary every learner agrees on.

Later signals are ignored (logged): torchrun forwards SIGTERM to workers that SLURM has often
signalled already, and a second one must not kill a learner in the middle of its checkpoint.
A learner that cannot stop is ended by SIGKILL (SLURM's KillWait) or by the hang watchdog.
"""

from __future__ import annotations

import logging
import signal
import threading

log = logging.getLogger("asr.stop")

# The status of a training stopped on request after saving its checkpoint: EX_TEMPFAIL of
# sysexits.h ("try again later"); scripts/slurm/train.sbatch requeues the job on it.
EXIT_PREEMPTED = 75
SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class Preempted(Exception):
    """Raised once the stopped stage has saved what it needs to go on; exit EXIT_PREEMPTED."""


class Terminated(BaseException):
    """A data stage signalled: raised where it is, so every atomic write in progress removes
    its temporary file on the way out (asr/utils/atomic.py) and nothing half-written stays.
    A BaseException, so that no `except Exception` of the stage's own swallows it."""


def terminate_on_signal() -> None:
    """Data stages: SIGTERM/SIGUSR1 end the stage at once, by Terminated (main thread only)."""

    def handle(signum, frame):
        for sig in SIGNALS:  # one unwinding: a second signal must not interrupt the clean-up
            signal.signal(sig, signal.SIG_IGN)
        raise Terminated(signal.Signals(signum).name)

    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            signal.signal(sig, handle)


def default_signals() -> None:
    """A pool worker forked from a stage: SIGTERM/SIGUSR1 end it at once, as by default. An
    inherited Python handler runs only once the worker's main thread runs Python again, so a
    worker blocked in C (a lock taken over the fork) outlived Pool.terminate(), and the stage
    waited on it for ever after its work was written."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


class StopRequest:
    def __init__(self):
        self.signal_name: str | None = None
        self.previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.signal_name is None:
            self.signal_name = name
            log.warning("%s received: stopping at the next step boundary, after saving a checkpoint", name)
        else:
            log.warning("%s received again: already stopping", name)

    def install(self) -> "StopRequest":
        """Catch the signals (main thread only: Python delivers signals there)."""
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def uninstall(self) -> None:
        """The previous handlers back; once stopping, the signals stay ignored instead: the
        process is about to exit EXIT_PREEMPTED, and torchrun signals the learners still running
        when the first one exits."""
        for sig, handler in self.previous.items():
            signal.signal(sig, signal.SIG_IGN if self.requested else handler)
        self.previous.clear()

    def request(self, name: str = "request") -> None:
        """Stop as if signalled (tests, and a peer's stop learnt over the network)."""
        self.signal_name = self.signal_name or name
