"""`python -m tests.faults.hung_train <overrides>`: asr.train where learner R stops answering in
its batch N + 1 (ASR_TEST_HANG="R:N"), busy in its own computation (not in a collective), with
the hang limit inside the steps lowered to 3 s so that the test takes seconds."""

import os
import time

from asr.distributed import context
from asr.train import loop
from asr.train.__main__ import main

rank, batches = (int(x) for x in os.environ["ASR_TEST_HANG"].split(":"))
context.STEP_HANG_MIN_S = 3.0
context.HEARTBEAT_S = 0.5
original = loop.Trainer.train_batch
count = {"n": 0}


def train_batch(self, batch):
    count["n"] += 1
    if self.dist.rank == rank and count["n"] == batches + 1:
        stop = getattr(self, "stop", None)  # None before the toolkit caught SIGTERM: the signal ends it
        while stop is None or not stop.requested:  # until torchrun ends the job (SIGTERM)
            time.sleep(0.1)
    original(self, batch)


loop.Trainer.train_batch = train_batch

if __name__ == "__main__":
    main()
