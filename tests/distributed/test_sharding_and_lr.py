"""The sampler's shards (equal batches per learner, union = the one-learner batch) and the
learning rate scaled with the global batch."""

from types import SimpleNamespace

import numpy as np
import pytest

from asr.optim.schedule import scaled_lr
from asr.train.data import BucketBatchSampler, make_buckets
from asr.utils.errors import InputError

LENGTHS = np.random.default_rng(5).integers(50, 400, size=203).tolist()


@pytest.mark.parametrize("learners", [2, 3, 4])
def test_learners_union_is_the_single_learner_batch_with_n_times_the_size(learners):
    shards = [BucketBatchSampler(LENGTHS, 2000, 16, seed=7, num_replicas=learners, rank=r) for r in range(learners)]
    single = BucketBatchSampler(LENGTHS, 2000 * learners, 16 * learners, seed=7)
    for epoch in (0, 1):
        for s in shards + [single]:
            s.set_epoch(epoch)
        per_learner = [list(s) for s in shards]
        assert len({len(b) for b in per_learner}) == 1  # the same number of steps for everyone
        for step, whole in enumerate(single):
            parts = [per_learner[r][step] for r in range(learners)]
            assert all(parts) and sorted(i for p in parts for i in p) == sorted(whole)
            assert max(len(p) for p in parts) - min(len(p) for p in parts) <= 1  # balanced
        seen = sorted(i for b in per_learner for batch in b for i in batch)
        assert seen == list(range(len(LENGTHS)))  # every utterance once per epoch


def test_shard_resumes_mid_epoch_and_epochs_reshuffle():
    s = BucketBatchSampler(LENGTHS, 2000, 16, seed=7, num_replicas=2, rank=1)
    s.set_epoch(1)
    full = list(s)
    s.set_epoch(1, start=3)
    assert list(s) == full[3:] and len(s) == len(full) - 3
    s.set_epoch(2)
    assert list(s) != full


def test_min_utts_keeps_one_utterance_per_learner():
    lengths = [100, 100, 100, 900, 900]
    assert make_buckets(lengths, range(5), 500, 8) == [[0, 1, 2], [3], [4]]
    assert make_buckets(lengths, range(5), 500, 8, min_utts=2) == [[0, 1, 2], [3, 4]]
    # A short last batch joins the one before it.
    assert make_buckets([1] * 5, range(5), 1000, 2, min_utts=2) == [[0, 1], [2, 3, 4]]
    with pytest.raises(InputError, match="3 utterances cannot give a batch to each of 4 learners"):
        BucketBatchSampler([1, 2, 3], 100, 4, num_replicas=4, rank=0)


def test_lr_scales_with_the_global_batch():
    cfg = SimpleNamespace(lr=0.1, max_frames=1000, lr_scaling="linear", lr_reference_frames=0)
    assert scaled_lr(cfg, 1) == pytest.approx(0.1) and scaled_lr(cfg, 8) == pytest.approx(0.8)
    cfg.lr_reference_frames = 4000  # lr tuned for a global batch of 4000 frames
    assert scaled_lr(cfg, 16) == pytest.approx(0.4)
    cfg.lr_scaling = "sqrt"
    assert scaled_lr(cfg, 16) == pytest.approx(0.2)
    cfg.lr_scaling = "none"
    assert scaled_lr(cfg, 64) == 0.1
    cfg.lr_scaling = "cubic"
    with pytest.raises(ValueError, match="lr_scaling"):
        scaled_lr(cfg, 2)
