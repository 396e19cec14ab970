"""`python -m tests.faults.killed_train <overrides>`: asr.train under decentralized training where,
in torchrun's first attempt, learner R (ASR_TEST_KILL="R", one learner per node) waits at its
first batch until every other node has written its first node checkpoint, then SIGKILLs
itself: killed before its own first checkpoint, after the others'."""

import os
import signal
import time

from asr.train import loop
from asr.train.__main__ import main
from asr.train.resume import node_dir

RANK = int(os.environ["ASR_TEST_KILL"])
original = loop.Trainer.train_batch


def others_saved(self) -> bool:
    nodes = [n for n in range(self.dist.world_size) if n != RANK]
    return all(any(node_dir(self.checkpoints, n).glob("step-*.pt")) for n in nodes)


def train_batch(self, batch):
    if self.dist.rank == RANK and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
        deadline = time.monotonic() + 60
        while not others_saved(self) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)
    original(self, batch)


loop.Trainer.train_batch = train_batch

if __name__ == "__main__":
    main()
