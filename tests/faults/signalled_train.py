"""`python -m tests.faults.signalled_train <overrides>`: asr.train, where learner R sends itself
SIGTERM while it trains its batch N + 1 (ASR_TEST_SIGNAL="R:N"): a signal that reaches one
learner alone, at a known point, however fast the toy steps are.

ASR_TEST_PACE="R1,R2:S" makes learners R1, R2 sleep S seconds before every batch, so the other
learners claim most of an epoch's batches: the signalled learner then meets its batch N + 1
before the epoch can end, however the processes' start-ups happen to be ordered."""

import os
import signal
import time

from asr.train import loop
from asr.train.__main__ import main

rank, batches = (int(x) for x in os.environ["ASR_TEST_SIGNAL"].split(":"))
paced, _, pause = os.environ.get("ASR_TEST_PACE", ":0").partition(":")
paced_ranks = {int(r) for r in paced.split(",") if r}
original = loop.Trainer.train_batch
count = {"n": 0}


def train_batch(self, batch):
    count["n"] += 1
    if self.dist.rank in paced_ranks:
        time.sleep(float(pause))
    if self.dist.rank == rank and count["n"] == batches + 1:
        os.kill(os.getpid(), signal.SIGTERM)
    original(self, batch)


loop.Trainer.train_batch = train_batch

if __name__ == "__main__":
    main()
