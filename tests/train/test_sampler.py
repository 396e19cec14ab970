"""Length-bucketed batch sampler: coverage, size bounds, determinism, mid-epoch resume."""

import random

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
