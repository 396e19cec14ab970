"""What a checkpoint of several learners holds per learner, and when a changed number of
learners may resume it."""

from pathlib import Path

import pytest
import torch

from asr.distributed.checkpointing import check_learners, distributed_entry, learner_rng
from asr.distributed.context import DistributedContext
from asr.utils.errors import InputError


def state(world_size, batches_done):
    rngs = [{"torch": torch.full((3,), r, dtype=torch.uint8)} for r in range(world_size)]
    return {"rng": rngs[0], "sampler": {"epoch": 1, "batches_done": batches_done},
            "distributed": {"world_size": world_size, "rng_by_rank": rngs}}


def test_each_learner_gets_its_own_random_state_back():
    saved = state(4, 7)
    for rank in range(4):
        assert torch.equal(learner_rng(saved, DistributedContext(rank=rank, world_size=4))["torch"], torch.full((3,), rank, dtype=torch.uint8))
    # Another number of learners: rank 0 continues rank 0's stream, the others start afresh.
    assert learner_rng(saved, DistributedContext(rank=0, world_size=2)) is saved["rng"]
    assert learner_rng(saved, DistributedContext(rank=1, world_size=2)) is None
    # A single-learner checkpoint (no distributed entry) resumes as before.
    assert learner_rng({"rng": "r0"}, DistributedContext()) == "r0"


def test_changing_the_number_of_learners_only_at_an_epoch_end(caplog):
    check_learners(state(2, 5), DistributedContext(rank=0, world_size=2), Path("ckpt"))
    with pytest.raises(InputError, match="taken mid-epoch with 2 learner\\(s\\), resumed with 4.*Resume with 2"):
        check_learners(state(2, 5), DistributedContext(rank=0, world_size=4), Path("ckpt"))
    check_learners(state(2, 0), DistributedContext(rank=0, world_size=4), Path("ckpt"))
    assert "trained so far with 2 learner(s), continuing with 4" in caplog.text


def test_entry_of_a_single_learner():
    entry = distributed_entry(DistributedContext(), 0.0)
    assert entry["world_size"] == 1 and entry["algorithm"] == "none" and len(entry["rng_by_rank"]) == 1
