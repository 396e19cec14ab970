"""`python -m tests.faults.slow_resume_train <overrides>`: asr.train where learner R (the passive
one: ASR_TEST_SLOW_RESUME="R") takes 3 s between learning where to start and loading its state,
and writes to <exp_dir>/first-served.txt whether the first weights its exchange server read
were its freshly initialised ones ("initial") or not ("loaded").

After its first batch the passive waits until its server has served an exchange (at most
HOLD_LIMIT_S): left to run, it could claim the rest of the epoch before the active learner
trained a batch, and then no exchange would happen at all, however correct the order of
loading."""

import os
import threading
import time
from pathlib import Path

import torch

from asr.distributed import staging
from asr.distributed.flat import flat_parameters
from asr.train import loop
from asr.train.__main__ import main

HOLD_LIMIT_S = 120.0

RANK = int(os.environ["ASR_TEST_SLOW_RESUME"])
seen: dict = {}
served = threading.Event()
original_init, original_find_start, original_snapshot = loop.Trainer.__init__, loop.find_start, staging.Staging.snapshot
original_train_batch = loop.Trainer.train_batch
batches = {"n": 0}


def init(self, cfg, dist=None):
    original_init(self, cfg, dist)
    if self.dist.rank == RANK:
        seen["report"] = Path(cfg.exp_dir) / "first-served.txt"
        seen["initial"] = flat_parameters(list(self.model.parameters())).detach().clone()


def find_start(checkpoints, ctx, *args):
    start = original_find_start(checkpoints, ctx, *args)  # a collective: every learner got here
    if ctx.rank == RANK:
        time.sleep(3)
    return start


def snapshot(self, params, lo, hi, *args, **kwargs):
    if "initial" in seen and "served" not in seen:  # the passive's server: its first exchange
        current = flat_parameters(params)[lo:hi]
        seen["served"] = "initial" if torch.equal(current, seen["initial"][lo:hi]) else "loaded"
        seen["report"].write_text(seen["served"])
        served.set()
    return original_snapshot(self, params, lo, hi, *args, **kwargs)


def train_batch(self, batch):
    batches["n"] += 1
    if self.dist.rank == RANK and batches["n"] > 1:
        served.wait(HOLD_LIMIT_S)
    original_train_batch(self, batch)


loop.Trainer.__init__, loop.find_start, staging.Staging.snapshot = init, find_start, snapshot
loop.Trainer.train_batch = train_batch

if __name__ == "__main__":
    main()
