"""Frame-level training on fixed-length samples (train.chunk_frames > 0, frame objectives only).

As the paper trains its hybrid BLSTM (Zhang et al., INTERSPEECH 2019: samples of 21 frames,
the LSTM unrolled 21 steps, 128 samples per GPU), every training utterance is cut into samples
of `chunk_frames` frames, the samples of the whole set are shuffled together, and a batch is
`train.batch_samples` samples per learner. Each sample is one item of `FrameChunks`, so the
plan, the claims (ADPSGD, H-ADPSGD) and the resume masks count samples, not utterances.

- Remainder: an utterance of T frames gives floor(T / chunk_frames) samples, laid end to end
  from an offset drawn anew every epoch (from the seed, the epoch and the utterance) between 0
  and the T mod chunk_frames frames left over (in steps of model.subsample). So an epoch trains
  every frame of its samples exactly once and leaves out fewer than chunk_frames frames of each
  utterance, different ones every epoch; utterances shorter than one sample are left out
  (counted in the log).
- Context: none beyond the sample. The BLSTM sees its chunk_frames frames only, from a zero
  state in both directions, and every one of them has its target. Features whose deltas the
  reader appends get them from the whole utterance (asr.features.featureset.FeatureReader.rows),
  so a sample's input is exactly those rows of its utterance's input. A batch's samples are
  decoded together, only their rows (FeatureReader.samples): see `python -m asr.bench chunks`.
- State: not carried from sample to sample. Consecutive samples of a batch come from unrelated
  utterances, so there is no previous state to carry.
- Batches: `batch_samples` samples per learner (a group of N learners stepping together cuts
  N x batch_samples and deals them out by stride); only the last batch of an epoch's plan holds
  what is left over (fewer samples).

The dev set is still evaluated on whole utterances (the decoder's input).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset, Sampler

from asr.train.frame_targets import FrameCeDataset
from asr.utils.errors import InputError

log = logging.getLogger(__name__)


def check_chunking(cfg) -> None:
    """train.chunk_frames fits the objective and the model's frame rate."""
    tcfg = cfg.train
    if not tcfg.chunk_frames:
        return
    if tcfg.objective != "frame_ce":
        raise InputError(
            f"train.chunk_frames={tcfg.chunk_frames} cuts frame-level samples, but train.objective={tcfg.objective}; "
            "use train.chunk_frames=0 (whole utterances) or train.objective=frame_ce"
        )
    subsample = int(cfg.model.subsample)
    if tcfg.chunk_frames % subsample:
        raise InputError(
            f"train.chunk_frames={tcfg.chunk_frames} is not a multiple of model.subsample={subsample}; "
            "make it one so every sample has whole output frames"
        )


class FrameChunks(Dataset):
    """Samples of `chunk_frames` frames of a FrameCeDataset's (first `max_utts`) utterances:
    item i is (name "<utt>@<start frame>", features (chunk_frames, D), pdf ids
    (chunk_frames / subsample,)). What is held is two numbers per utterance."""

    def __init__(self, utterances: FrameCeDataset, chunk_frames: int, subsample: int, seed: int, max_utts: int = 0):
        self.utterances = utterances
        self.chunk_frames, self.subsample, self.seed = chunk_frames, subsample, seed
        frames = np.asarray(utterances.num_frames[: max_utts or None], dtype=np.int64)
        counts = frames // chunk_frames
        self.offsets = np.concatenate([[0], np.cumsum(counts)])  # samples of utterance u: offsets[u] .. offsets[u + 1]
        self.spare = frames - counts * chunk_frames  # frames left over in each utterance
        self.epoch, self.shift = 0, self._shifts(0)
        too_short = int(np.sum(counts == 0))
        if not len(self):
            raise InputError(
                f"no training utterance has {chunk_frames} frames (train.chunk_frames); lower train.chunk_frames"
            )
        log.info(
            "%d samples of %d frames from %d utterances (%d shorter than a sample left out; %d of %d frames, %.1f%%, "
            "left over each epoch)",
            len(self),
            chunk_frames,
            len(frames) - too_short,
            too_short,
            int(self.spare.sum()),
            int(frames.sum()),
            100 * self.spare.sum() / max(1, frames.sum()),
        )

    @property
    def reader(self):
        return self.utterances.reader  # where the trainer sets `augment` and error messages find `set_dir`

    @property
    def feat_dim(self) -> int:
        return self.utterances.feat_dim

    @property
    def num_utts(self) -> int:
        return len(self.spare)

    def pdf_counts(self, num_pdfs: int) -> np.ndarray:
        return self.utterances.pdf_counts(num_pdfs)  # the priors: of every frame, left-over ones too

    def max_pdf(self) -> int:
        return self.utterances.max_pdf()

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def set_epoch(self, epoch: int) -> None:
        """The epoch's offsets (the same whichever learner, thread or resumed run asks)."""
        if epoch != self.epoch:
            self.epoch, self.shift = epoch, self._shifts(epoch)

    def set_seed(self, seed: int) -> None:
        """Offsets drawn from another seed: the sweep's runs each cut the samples by their own."""
        if seed != self.seed:
            self.seed = seed  # before the shifts: they are drawn from it
            self.shift = self._shifts(self.epoch)

    def _shifts(self, epoch: int) -> np.ndarray:
        steps = self.spare // self.subsample + 1
        rng = np.random.default_rng([self.seed, epoch, 0x636875])
        return (rng.integers(0, steps) * self.subsample).astype(np.int64)

    def locate(self, indices) -> tuple[np.ndarray, np.ndarray]:
        """(utterance, first frame) of samples `indices` in the current epoch."""
        indices = np.asarray(indices, dtype=np.int64)
        utts = np.searchsorted(self.offsets, indices, side="right") - 1
        return utts, self.shift[utts] + (indices - self.offsets[utts]) * self.chunk_frames

    def __getitem__(self, index: int) -> tuple[str, Tensor, Tensor]:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[str, Tensor, Tensor]]:
        """A batch's samples, their features decoded together (FeatureReader.samples)."""
        utts, starts = self.locate(indices)
        names = [self.utterances.utts[u] for u in utts.tolist()]
        feats = self.reader.samples(names, starts.tolist(), self.chunk_frames)
        items, s = [], self.subsample
        for index, u, utt, start, sample in zip(indices, utts.tolist(), names, starts.tolist(), feats):
            if self.reader.augment is not None:
                sample = self.reader.augment(sample, int(index))
            targets = torch.from_numpy(
                self.utterances.targets[u][start // s : (start + self.chunk_frames) // s].astype(np.int64)
            )
            items.append((f"{utt}@{start}", sample, targets))
        return items


class SampleBatchSampler(Sampler[np.ndarray]):
    """Batches of `batch_samples` samples per learner, over all samples in an order drawn from
    (seed, epoch): the fixed-length counterpart of asr.train.data.BucketBatchSampler, with its
    interface (plans, shards, masks of what was trained), which ClaimedBatchSampler and resume use.

    `window_starts` (sample indices where windows of train.shuffle_window_utts utterances start):
    windows in random order, samples shuffled within each, so an epoch reads one stretch of the
    archives at a time. Plans are numpy arrays: SWB-2000 has some 30 million samples.
    """

    def __init__(
        self,
        num_samples: int,
        batch_samples: int,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        window_starts: np.ndarray | None = None,
    ):
        if batch_samples < 1:
            raise ValueError(f"batch_samples ({batch_samples}) must be >= 1")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not one of {num_replicas} learners")
        if num_samples < num_replicas:
            raise InputError(
                f"{num_samples} samples cannot give a batch to each of {num_replicas} learners; use fewer processes"
            )
        self.num_samples, self.batch_samples, self.seed = num_samples, batch_samples, seed
        self.num_replicas, self.rank = num_replicas, rank
        self.window_starts = window_starts
        self.index_type = np.int32 if num_samples < 2**31 else np.int64  # half the plan's memory
        self.epoch, self.start = 0, 0
        self.done: np.ndarray | None = None
        self._plan: tuple[tuple, list[np.ndarray]] | None = None

    def global_batches(self, epoch: int, done: np.ndarray | None = None) -> list[np.ndarray]:
        key = (epoch, None if done is None else hashlib.sha1(np.packbits(done).tobytes()).hexdigest())
        if self._plan is not None and self._plan[0] == key:
            return self._plan[1]
        order = self._order(np.random.default_rng([self.seed, epoch]))
        if done is not None:
            order = order[~done[order]]
        self._plan = (key, self._cut(order))
        return self._plan[1]

    def _order(self, rng: np.random.Generator) -> np.ndarray:
        if self.window_starts is None:
            return rng.permutation(self.num_samples).astype(self.index_type)
        bounds = np.append(self.window_starts, self.num_samples)
        parts = [bounds[w] + rng.permutation(bounds[w + 1] - bounds[w]) for w in rng.permutation(len(bounds) - 1)]
        return np.concatenate(parts).astype(self.index_type) if parts else np.zeros(0, self.index_type)

    def _cut(self, order: np.ndarray) -> list[np.ndarray]:
        n = self.num_replicas
        size = self.batch_samples * n
        batches = [order[i : i + size] for i in range(0, len(order), size)]
        if len(batches) > 1 and len(batches[-1]) < n:  # not one sample per learner: joins the batch before
            batches[-2:] = [np.concatenate(batches[-2:])]
        return [b for b in batches if len(b)]

    def shard(self, batch: np.ndarray) -> np.ndarray:
        return batch[self.rank :: self.num_replicas]

    def batches(self, epoch: int) -> list[np.ndarray]:
        return [self.shard(batch) for batch in self.global_batches(epoch, self.done)]

    def set_epoch(self, epoch: int, start: int = 0, done: np.ndarray | None = None) -> None:
        self.epoch, self.start = epoch, start
        self.done = done if done is not None and done.any() else None

    def num_batches(self) -> int:
        return len(self.global_batches(self.epoch, self.done))

    def trained(self, epoch: int, done: np.ndarray | None, batch_indices: Sequence[int]) -> np.ndarray:
        mask = np.zeros(self.num_samples, dtype=bool) if done is None else done.copy()
        plan = self.global_batches(epoch, done if done is not None and done.any() else None)
        for i in batch_indices:
            mask[plan[i]] = True
        return mask

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter(self.batches(self.epoch)[self.start :])

    def __len__(self) -> int:
        return max(0, self.num_batches() - self.start)


def window_starts(chunks: FrameChunks, window_utts: int) -> np.ndarray | None:
    """The first sample of every window of `window_utts` utterances (None: no windows)."""
    if not window_utts:
        return None
    return np.unique(chunks.offsets[:-1][::window_utts])
