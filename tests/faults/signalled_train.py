"""`python -m tests.faults.signalled_train <overrides>`: asr.train, where learner R sends itself
SIGTERM while it trains its batch N + 1 (ASR_TEST_SIGNAL="R:N"): a signal that reaches one
learner alone, at a known point, however fast the toy steps are.

ASR_TEST_HOLD="R1,R2" makes learners R1, R2 wait before each of their batches after the first
until learner R has sent its signal (it creates the file ASR_TEST_SIGNAL_SENT just before), so
the other learners claim the epoch's batches meanwhile: the signalled learner meets its batch
N + 1 before the epoch can end, however loaded the machine and however the processes' start-ups
happen to be ordered. A wait that lasts HOLD_LIMIT_S ends anyway, and the test's checks say why."""

import os
import signal
import time
from pathlib import Path

from asr.train import loop
from asr.train.__main__ import main

HOLD_LIMIT_S = 120.0

rank, batches = (int(x) for x in os.environ["ASR_TEST_SIGNAL"].split(":"))
held_ranks = {int(r) for r in os.environ.get("ASR_TEST_HOLD", "").split(",") if r}
sent = Path(os.environ["ASR_TEST_SIGNAL_SENT"])
original = loop.Trainer.train_batch
count = {"n": 0}


def hold_until_signal_sent() -> None:
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not sent.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def train_batch(self, batch):
    count["n"] += 1
    if self.dist.rank in held_ranks and count["n"] > 1:
        hold_until_signal_sent()
    if self.dist.rank == rank and count["n"] == batches + 1:
        sent.touch()
        os.kill(os.getpid(), signal.SIGTERM)
    original(self, batch)


loop.Trainer.train_batch = train_batch

if __name__ == "__main__":
    main()
