"""Length-bucketed batch sampler: coverage, size bounds, determinism, mid-epoch resume."""

import random

import numpy as np
import pytest

from asr.train.data import BucketBatchSampler, make_buckets

LENGTHS = [random.Random(7).randint(50, 400) for _ in range(203)]


def sampler(**kw):
    args = dict(lengths=LENGTHS, max_frames=1500, max_utts=8, seed=3)
    return BucketBatchSampler(**(args | kw))


def padded_frames(batch):
    return len(batch) * max(LENGTHS[i] for i in batch)


@pytest.mark.parametrize("epoch", [0, 1, 5])
def test_every_utterance_once_per_epoch_within_bounds(epoch):
    s = sampler()
    s.set_epoch(epoch)
    batches = list(s)
    assert sorted(i for b in batches for i in b) == list(range(len(LENGTHS)))
    assert all(padded_frames(b) <= 1500 and len(b) <= 8 for b in batches)
    assert len(batches) == len(s) == s.num_batches()
    # Bucketing: utterances in a batch have similar lengths (sorted order cut into runs).
    spread = [max(LENGTHS[i] for i in b) - min(LENGTHS[i] for i in b) for b in batches]
    assert sum(spread) / len(spread) < 20


def test_deterministic_per_seed_and_epoch():
    a, b = sampler(), sampler()
    a.set_epoch(2)
    b.set_epoch(2)
    assert list(a) == list(b)
    b.set_epoch(3)
    assert list(a) != list(b)  # a new order every epoch
    c = sampler(seed=4)
    c.set_epoch(2)
    assert list(a) != list(c)


def test_resume_mid_epoch_continues_exactly():
    full = sampler()
    full.set_epoch(1)
    batches = list(full)
    resumed = sampler()  # a fresh process after a crash
    resumed.set_epoch(1, start=11)
    assert list(resumed) == batches[11:]
    assert len(resumed) == len(batches) - 11


def test_no_shuffle_is_sorted_and_epoch_independent():
    s = sampler(shuffle=False)
    s.set_epoch(0)
    first = list(s)
    s.set_epoch(9)
    assert list(s) == first
    flat = [LENGTHS[i] for b in first for i in b]
    assert flat == sorted(flat)


def test_overlong_utterance_is_a_batch_of_its_own():
    lengths = [100, 5000, 120, 90]
    batches = make_buckets(lengths, sorted(range(4), key=lengths.__getitem__), max_frames=400, max_utts=10)
    assert batches == [[3, 0, 2], [1]]
    assert make_buckets(lengths, [3, 0, 2], max_frames=400, max_utts=2) == [[3, 0], [2]]


def test_windowed_shuffle_reads_one_stretch_of_the_archives_at_a_time():
    """With a window, every batch comes from one window of consecutive utterances, the windows
    come in random order, each utterance once per epoch; sharding and `done` still apply."""
    lengths = list(np.random.default_rng(3).integers(100, 1000, size=300))
    s = BucketBatchSampler(lengths, 4000, 8, seed=4, window=50)
    batches = s.global_batches(2)
    assert sorted(i for b in batches for i in b) == list(range(300))
    windows = [{i // 50 for i in b} for b in batches]
    assert all(len(w) == 1 for w in windows)  # no batch spans two windows
    order = [next(iter(w)) for w in windows]
    visits = [w for i, w in enumerate(order) if i == 0 or order[i - 1] != w]
    assert sorted(visits) == list(range(6)) and visits != list(range(6))  # each window once, shuffled
    assert s.global_batches(3) != batches  # another epoch, another order
    done = np.zeros(300, dtype=bool)
    done[:120] = True
    assert sorted(i for b in s.global_batches(2, done) for i in b) == list(range(120, 300))
    shards = [BucketBatchSampler(lengths, 4000, 8, seed=4, window=50, num_replicas=2, rank=r) for r in range(2)]
    for shard in shards:
        shard.set_epoch(2)
    union = [sorted(a + b) for a, b in zip(*(x.batches(2) for x in shards))]
    assert union == [sorted(b) for b in shards[0].global_batches(2)]
