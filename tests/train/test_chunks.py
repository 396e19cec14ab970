"""Frame-level training on fixed-length samples (train.chunk_frames, asr/train/chunks.py): every
frame of an epoch trained once apart from the stated remainder, batches of batch_samples, the
samples' inputs their utterances' rows, exact mid-epoch resume, and the config errors."""

import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tests.fixtures.hybrid_corpus import hybrid_overrides, write_hybrid_corpus

from asr.config import load_config
from asr.models.checkpoint import CheckpointDir, load_checkpoint
from asr.train import loop
from asr.train.chunks import FrameChunks, SampleBatchSampler, window_starts
from asr.train.data import ClaimedBatchSampler
from asr.utils.errors import InputError

torch.set_num_threads(1)

CHUNK = 8  # the toy utterances have 12-90 frames; model.subsample=2 in hybrid_overrides


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_hybrid_corpus(tmp_path_factory.mktemp("hybrid"))


def chunk_overrides(root, *extra):
    return hybrid_overrides(
        root,
        [
            f"train.chunk_frames={CHUNK}",
            "train.batch_samples=16",
            "train.epochs=2",
            "train.checkpoint_every_steps=5",
            "train.precision=fp32",
            *extra,
        ],
    )


@pytest.fixture(scope="module")
def chunks(corpus):
    trainer = loop.Trainer(load_config(chunk_overrides(corpus)))
    return SimpleNamespace(dataset=trainer.train_set, utterances=trainer.train_set.utterances, trainer=trainer)


def trained_frames(dataset: FrameChunks, sampler, epoch: int) -> list[np.ndarray]:
    """How often each frame of each utterance is in the epoch's batches."""
    dataset.set_epoch(epoch)
    sampler.set_epoch(epoch)
    counts = [np.zeros(n, dtype=int) for n in dataset.utterances.num_frames]
    for batch in sampler:
        for utt, start in zip(*dataset.locate(batch)):
            counts[utt][start : start + dataset.chunk_frames] += 1
    return counts


def test_an_epoch_trains_every_frame_once_but_the_left_over_ends(chunks):
    dataset = chunks.dataset
    sampler = SampleBatchSampler(len(dataset), 16, seed=3)
    firsts = []
    for epoch in range(3):
        counts = trained_frames(dataset, sampler, epoch)
        first = []
        for n, count in zip(dataset.utterances.num_frames, counts):
            assert count.max() <= 1
            assert count.sum() == n // CHUNK * CHUNK  # only the remainder, fewer than CHUNK frames, left over
            trained = np.flatnonzero(count)
            if len(trained):  # one run of frames: the remainder lies at the ends
                assert trained[-1] - trained[0] + 1 == len(trained)
                first.append(trained[0])
            assert len(trained) or n < CHUNK
        firsts.append(first)
    assert firsts[0] != firsts[1] != firsts[2]  # the left-over frames move from epoch to epoch
    assert all(f % 2 == 0 for f in firsts[0])  # whole output frames of model.subsample=2


def test_the_offsets_follow_seed_and_epoch_whatever_came_before(chunks):
    """A sweep worker's first run used to cut its samples from the previous seed's offsets."""
    made = FrameChunks(chunks.utterances, CHUNK, 2, seed=1)
    made.set_seed(2)
    fresh = FrameChunks(chunks.utterances, CHUNK, 2, seed=2)
    assert np.array_equal(made.shift, fresh.shift)
    made.set_epoch(1)
    made.set_epoch(0)
    assert np.array_equal(made.shift, fresh.shift)


def test_a_sample_is_its_utterances_rows_with_their_targets(chunks):
    dataset, utterances = chunks.dataset, chunks.utterances
    dataset.set_epoch(1)
    indices = [0, 5, len(dataset) // 2, len(dataset) - 1]
    for index, (name, feats, targets) in zip(indices, dataset.__getitems__(indices)):
        utt_index, start = (int(v[0]) for v in dataset.locate([index]))
        utt = utterances.utts[utt_index]
        assert name == f"{utt}@{start}" and feats.shape == (CHUNK, utterances.feat_dim)
        assert torch.equal(feats, utterances.reader(utt)[start : start + CHUNK])
        assert torch.equal(
            targets, torch.from_numpy(utterances.targets[utt_index][start // 2 : (start + CHUNK) // 2].astype(np.int64))
        )


@pytest.mark.parametrize("learners", [1, 2, 3])
def test_batches_hold_batch_samples_and_the_learners_share_every_sample_once(learners):
    samplers = [SampleBatchSampler(103, 8, seed=1, num_replicas=learners, rank=r) for r in range(learners)]
    per_learner = [list(s) for s in samplers]
    sizes = [len(b) for batches in per_learner for b in batches[:-1]]
    assert set(sizes) == {8}  # only the plan's last batch holds the rest
    taken = np.concatenate([b for batches in per_learner for b in batches])
    assert sorted(taken.tolist()) == list(range(103))
    assert [len(batches) for batches in per_learner] == [samplers[0].num_batches()] * learners


def test_claimed_batches_and_the_trained_mask_count_samples():
    sampler = SampleBatchSampler(50, 4, seed=2)
    sampler.set_epoch(0)
    counter = iter(range(100))
    claims = ClaimedBatchSampler(sampler, lambda size: i if (i := next(counter)) < size else None)
    taken = []
    for batch in claims:
        taken.append(batch)
        if len(taken) == 5:
            break
    mask = sampler.trained(0, None, claims.claimed)
    assert mask.sum() == 20 and set(np.flatnonzero(mask)) == set(np.concatenate(taken).tolist())
    sampler.set_epoch(0, done=mask)  # a resume re-plans what is left
    rest = np.concatenate(list(sampler))
    assert sorted(rest.tolist()) == sorted(set(range(50)) - set(np.flatnonzero(mask)))


def test_windows_keep_an_epoch_within_stretches_of_utterances(chunks):
    dataset = chunks.dataset
    starts = window_starts(dataset, 10)
    sampler = SampleBatchSampler(len(dataset), 16, seed=0, window_starts=starts)
    order = np.concatenate(sampler.global_batches(0))
    assert sorted(order.tolist()) == list(range(len(dataset)))
    window_of = np.searchsorted(starts, order, side="right")
    assert np.count_nonzero(np.diff(window_of)) == len(starts) - 1  # each window's samples together


def final_weights(exp):
    return load_checkpoint(exp / "checkpoints" / "last.pt")["model"]


class Crash(Exception):
    pass


def test_resume_mid_epoch_with_samples_is_exact(corpus, tmp_path, monkeypatch, caplog):
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"
    for root in (reference, crashed):
        shutil.copytree(corpus, root)
    loop.train(load_config(chunk_overrides(reference)))
    per_epoch = load_checkpoint(reference / "exp" / "checkpoints" / "last.pt")["step"] // 2
    original, count = loop.Trainer.train_batch, {"n": 0}

    def train_batch(self, batch):
        assert len(batch.utts) == 16 or self.progress.batches_done == self.sampler.num_batches() - 1
        if count["n"] == per_epoch + 3:  # mid-epoch 2, after its checkpoint at step 15
            raise Crash
        count["n"] += 1
        original(self, batch)

    with monkeypatch.context() as m:
        m.setattr(loop.Trainer, "train_batch", train_batch)
        with pytest.raises(Crash):
            loop.train(load_config(chunk_overrides(crashed)))
    assert per_epoch < 15 < per_epoch + 3 and (crashed / "exp" / "checkpoints" / "step-000000015.pt").is_file()
    with caplog.at_level("INFO"):
        loop.train(load_config(chunk_overrides(crashed)))
    assert "resumed from step 15 (epoch 2, batch 1; exact start" in caplog.text
    expected, got = final_weights(reference / "exp"), final_weights(crashed / "exp")
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name
    state = load_checkpoint(CheckpointDir(crashed / "exp" / "checkpoints").periodic()[0])
    assert state["sampler"]["num_utts"] == len(
        loop.Trainer(load_config(chunk_overrides(crashed))).train_set
    )  # masks over samples


def test_chunks_for_another_objective_or_frame_rate_are_refused(corpus):
    with pytest.raises(
        InputError, match=r"train.chunk_frames=8 cuts frame-level samples, but train.objective=ctc; use"
    ):
        loop.Trainer(load_config(chunk_overrides(corpus, "train.objective=ctc", "model.head=ctc")))
    with pytest.raises(InputError, match=r"train.chunk_frames=7 is not a multiple of model.subsample=2"):
        loop.Trainer(load_config(chunk_overrides(corpus, "train.chunk_frames=7")))
    with pytest.raises(InputError, match=r"no training utterance has 500 frames \(train.chunk_frames\)"):
        loop.Trainer(load_config(chunk_overrides(corpus, "train.chunk_frames=500")))


def test_the_lr_scales_with_samples_times_frames(corpus):
    from asr.optim.schedule import batch_frames, scaled_lr

    cfg = load_config(chunk_overrides(corpus, "train.lr_scaling=linear", "train.lr_reference_frames=64"))
    assert batch_frames(cfg.train) == 16 * CHUNK
    assert scaled_lr(cfg.train, learners=4) == pytest.approx(0.02 * 4 * 16 * CHUNK / 64)


@pytest.mark.parametrize("key", ["train.subset_utts", "train.max_train_utts"])  # the old name still works
def test_subset_utts_cuts_the_samples_of_the_first_utterances(corpus, chunks, key):
    trainer = loop.Trainer(load_config(chunk_overrides(corpus, f"{key}=10")))
    frames = np.asarray(chunks.utterances.num_frames[:10])
    assert len(trainer.train_set) == trainer.num_train_utts == int((frames // CHUNK).sum())
    assert trainer.sampler.num_batches() == -(-len(trainer.train_set) // 16)
