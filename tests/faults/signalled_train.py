"""`python -m tests.faults.signalled_train <overrides>`: asr.train, where learner R sends itself
SIGTERM while it trains its batch N + 1 (ASR_TEST_SIGNAL="R:N"): a signal that reaches one
learner alone, at a known point, however fast the toy steps are."""

import os
import signal

from asr.train import loop
from asr.train.__main__ import main

rank, batches = (int(x) for x in os.environ["ASR_TEST_SIGNAL"].split(":"))
original = loop.Trainer.train_batch
count = {"n": 0}


def train_batch(self, batch):
    count["n"] += 1
    if self.dist.rank == rank and count["n"] == batches + 1:
        os.kill(os.getpid(), signal.SIGTERM)
    original(self, batch)


loop.Trainer.train_batch = train_batch

if __name__ == "__main__":
    main()
