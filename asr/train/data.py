"""Training data: CMVN-normalised features with token targets, and length-bucketed batches.

Features come from `<features.feats_dir>/<features.name>/<set>/` (feats.scp, feat_dim,
utt2num_frames, CMVN statistics); transcripts and speakers from the Kaldi data dir
`<data.data_dir>/<set>/`. Datasets are indexed by position so the batch sampler can work
on lengths alone, without reading a single matrix.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset, Sampler

from asr.features.cmvn import apply as apply_cmvn
from asr.features.featureset import FeatureLayout, checked_features
from asr.models.blstm import output_lengths
from asr.text.tokenizer import Tokenizer
from asr.train.index import IndexSources, load_index
from asr.utils.errors import InputError

log = logging.getLogger(__name__)


class EpochAugment:
    """Training-time augmentation (asr.features.specaugment) with random numbers drawn from
    (seed, epoch, utterance): the same masks whichever thread or worker reads an utterance, and
    whenever, so prefetching changes nothing and a resumed run repeats them exactly."""

    def __init__(self, augment, seed: int):
        self.augment, self.seed, self.epoch = augment, seed, 0

    def __call__(self, feats: Tensor, index: int) -> Tensor:
        generator = torch.Generator().manual_seed(hash((self.seed, self.epoch, index)) & (2**63 - 1))
        return self.augment(feats, generator=generator)


class CtcDataset(Dataset):
    """(utt, features (T, D), token ids) for the utterances with features and a transcript,
    read through the set's training index (asr/train/index.py): a few bytes per utterance.

    Utterances with an empty transcript (nothing to learn; validate flags them) and those too
    short for their transcript after subsampling (CTC would give them infinite loss) are
    dropped, with counts and the first ids in the log. `build=False`: use the index only if it
    exists (learners other than the first wait for it to be built).
    """

    def __init__(
        self,
        feats_set_dir: Path,
        data_dir: Path,
        tokenizer: Tokenizer,
        subsample: int,
        norm_vars: bool = True,
        build: bool = True,
    ):
        if not Path(data_dir).is_dir():
            raise InputError(f"{data_dir}: data directory not found; run the prepare stage first")
        self.set_dir = Path(feats_set_dir)
        self.layout = FeatureLayout.read(self.set_dir)
        self.feat_dim = self.layout.feat_dim
        sources = IndexSources.of(Path(data_dir), self.set_dir, tokenizer.path)
        index = load_index(sources, tokenizer, self.set_dir, build)
        if index is None:
            raise InputError(
                f"{self.set_dir}: the training index is missing (learner 0 builds it); "
                f"is {self.set_dir} on a file system every learner sees?"
            )
        self.index = index
        self.norm_vars = norm_vars
        self.augment = None  # training-time masking (asr.features.specaugment), set by the trainer
        available = torch.from_numpy(np.asarray(index.frames, dtype=np.int64))
        long_enough = output_lengths(available, subsample).numpy() >= np.maximum(1, np.asarray(index.min_frames))
        self.rows = np.flatnonzero(long_enough)
        self.num_frames = np.asarray(index.frames)[self.rows]
        self._report(Path(data_dir), int((~long_enough).sum()))

    def _report(self, data_dir: Path, too_short: int) -> None:
        meta = self.index.meta
        if not len(self.rows):
            raise InputError(
                f"{data_dir}: no utterance has both features ({self.set_dir}) and a transcript long enough for CTC"
            )
        if meta["empty_transcripts"]:
            log.warning(
                "%s: %d utterances with an empty transcript left out (python -m asr.data.fix drops them): %s",
                data_dir,
                meta["empty_transcripts"],
                " ".join(meta["empty_examples"]) + (" ..." if meta["empty_transcripts"] > 10 else ""),
            )
        with_feats = len(self.index) + meta["empty_transcripts"]
        log.info(
            "%s: kept %d of %d utterances with features and a transcript (%d too short for their transcript, "
            "%d with an empty one)",
            data_dir,
            len(self.rows),
            with_feats,
            too_short,
            meta["empty_transcripts"],
        )

    @property
    def reader(self) -> "CtcDataset":
        return self  # where the trainer sets `augment` and error messages find `set_dir`

    @property
    def utts(self) -> list[str]:
        return [self.index.utt(int(row)) for row in self.rows]

    def __len__(self) -> int:
        return len(self.rows)

    def features(self, index: int) -> Tensor:
        row = int(self.rows[index])
        feats = torch.from_numpy(
            checked_features(
                self.set_dir,
                self.index.utt(row),
                self.layout,
                lambda: self.index.features(row),
                lambda mat: self._normalise(row, mat),
            )
        )
        return self.augment(feats, index) if self.augment is not None else feats

    def _normalise(self, row: int, mat: np.ndarray) -> np.ndarray:
        stats = self.index.cmvn_stats(row)
        return np.array(mat, dtype=np.float32) if stats is None else apply_cmvn(mat, stats, self.norm_vars)

    def __getitem__(self, index: int) -> tuple[str, Tensor, Tensor]:
        row = int(self.rows[index])
        return self.index.utt(row), self.features(index), torch.from_numpy(self.index.token_ids(row))


@dataclass
class Batch:
    utts: list[str]
    feats: Tensor  # (B, T, D), zero-padded
    feat_lens: Tensor  # (B,)
    targets: Tensor  # (sum of target lengths,), concatenated
    target_lens: Tensor  # (B,)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        move = lambda t: t.to(device, non_blocking=non_blocking)  # noqa: E731
        return Batch(self.utts, move(self.feats), move(self.feat_lens), move(self.targets), move(self.target_lens))

    def pin_memory(self) -> "Batch":
        """Page-locked copies (the DataLoader calls this with pin_memory=True): a copy to the GPU
        from them can run asynchronously (non_blocking=True)."""
        return Batch(
            self.utts,
            self.feats.pin_memory(),
            self.feat_lens.pin_memory(),
            self.targets.pin_memory(),
            self.target_lens.pin_memory(),
        )

    def subset(self, keep: Sequence[bool]) -> "Batch":
        """The batch without the utterances whose `keep` is False (padding cut to the longest kept)."""
        rows = [i for i, k in enumerate(keep) if k]
        index = torch.tensor(rows, dtype=torch.long, device=self.feats.device)
        feat_lens = self.feat_lens[index]
        starts = torch.cumsum(self.target_lens, 0) - self.target_lens
        targets = [self.targets[int(starts[i]) : int(starts[i] + self.target_lens[i])] for i in rows]
        longest = int(feat_lens.max()) if rows else 0
        return Batch(
            [self.utts[i] for i in rows],
            self.feats[index, :longest],
            feat_lens,
            torch.cat(targets) if targets else self.targets[:0],
            self.target_lens[index],
        )


def collate(items: list[tuple[str, Tensor, Tensor]]) -> Batch:
    utts, feats, tokens = zip(*items)
    return Batch(
        utts=list(utts),
        feats=torch.nn.utils.rnn.pad_sequence(list(feats), batch_first=True),
        feat_lens=torch.tensor([f.shape[0] for f in feats]),
        targets=torch.cat(tokens) if tokens else torch.zeros(0, dtype=torch.long),
        target_lens=torch.tensor([t.shape[0] for t in tokens]),
    )


def make_buckets(
    lengths: Sequence[int], order: Sequence[int], max_frames: int, max_utts: int, min_utts: int = 1
) -> list[list[int]]:
    """Cut `order` (ascending length) into batches whose padded size fits max_frames.

    Padded size = utterances x longest utterance. An utterance longer than max_frames on its
    own is a batch of one (dropping it would silently shrink the training set). With
    min_utts > 1 (one utterance per learner at least) a batch closes only once it has that
    many, and a short last batch joins the one before it.
    """
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index in order:
        longest = max(longest, lengths[index])
        full = (len(current) + 1) * longest > max_frames or len(current) >= max_utts
        if current and full and len(current) >= min_utts:
            batches.append(current)
            current, longest = [], lengths[index]
        current.append(index)
    if current:
        if len(current) < min_utts and batches:
            batches[-1].extend(current)
        else:
            batches.append(current)
    return batches


class BucketBatchSampler(Sampler[list[int]]):
    """Length-bucketed batches, reshuffled deterministically from (seed, epoch).

    Each epoch: utterances sorted by length (ties in random order), cut into batches of at
    most `max_frames` padded frames and `max_utts` utterances, and the batch order shuffled.
    `set_epoch(epoch, start, done)` positions the sampler `start` batches into an epoch, which
    is how training resumes mid-epoch exactly where its checkpoint was taken; `done` (a mask
    over the utterances) leaves out those already trained this epoch, which is how a run
    resumed with another number of learners re-splits what is left of an epoch.

    Several learners stepping together (`num_replicas`, this one's `rank`): the batches are cut
    for the group's batch, num_replicas x (max_frames, max_utts), with at least one utterance
    per learner, and each is dealt out by stride (learner r takes utterances r, r + N, ... of
    the length-sorted batch), so every learner gets the same number of batches, of similar
    lengths, and the union of the learners' batches at step t is exactly the batch one
    learner with N x (max_frames, max_utts) gets at step t.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        max_frames: int,
        max_utts: int,
        seed: int = 0,
        shuffle: bool = True,
        num_replicas: int = 1,
        rank: int = 0,
        window: int = 0,
    ):
        if max_frames < 1 or max_utts < 1:
            raise ValueError(f"max_frames ({max_frames}) and max_utts ({max_utts}) must be >= 1")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not one of {num_replicas} learners")
        if len(lengths) < num_replicas:
            raise InputError(
                f"{len(lengths)} utterances cannot give a batch to each of {num_replicas} learners; use fewer processes"
            )
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.max_frames = max_frames
        self.max_utts = max_utts
        self.seed = seed
        self.shuffle = shuffle
        self.num_replicas = num_replicas
        self.rank = rank
        self.window = window
        self.epoch = 0
        self.start = 0
        self.done: np.ndarray | None = None
        self._plan: tuple[tuple, list[list[int]]] | None = None

    def global_batches(self, epoch: int, done: np.ndarray | None = None) -> list[list[int]]:
        """The batches of all learners together (of the only learner when there is one), of the
        utterances not in `done`; the same on every learner."""
        key = (epoch, None if done is None else done.tobytes())
        if self._plan is not None and self._plan[0] == key:
            return self._plan[1]
        batches = self._cut(epoch, done)
        self._plan = (key, batches)
        return batches

    def _cut(self, epoch: int, done: np.ndarray | None) -> list[list[int]]:
        n = self.num_replicas
        lengths = self.lengths.tolist()
        if not self.shuffle:
            order = sorted(self._remaining(range(len(lengths)), done), key=lambda i: lengths[i])
            return make_buckets(lengths, order, self.max_frames * n, self.max_utts * n, min_utts=n)
        rng = np.random.default_rng([self.seed, epoch])
        if self.window:
            return self._cut_windows(rng, done)
        shuffled = self._remaining(rng.permutation(len(lengths)).tolist(), done)
        order = sorted(shuffled, key=lambda i: lengths[i])  # stable: ties stay shuffled
        batches = make_buckets(lengths, order, self.max_frames * n, self.max_utts * n, min_utts=n)
        return [batches[i] for i in rng.permutation(len(batches))]

    def _cut_windows(self, rng: np.random.Generator, done: np.ndarray | None) -> list[list[int]]:
        """Windows of `window` consecutive utterances (in the features' order, i.e. where they
        lie in the archives) in random order, each bucketed and shuffled on its own: an epoch
        reads one stretch of the archives at a time, as Kaldi's shuffle buffer does, when the
        features do not fit in memory."""
        n, lengths, batches = self.num_replicas, self.lengths.tolist(), []
        starts = list(range(0, len(lengths), self.window))
        for start in (starts[i] for i in rng.permutation(len(starts))):
            members = self._remaining(range(start, min(start + self.window, len(lengths))), done)
            shuffled = [members[i] for i in rng.permutation(len(members))]
            order = sorted(shuffled, key=lambda i: lengths[i])
            cut = (
                make_buckets(lengths, order, self.max_frames * n, self.max_utts * n, min_utts=n)
                if len(order) >= n
                else []
            )
            batches += [cut[i] for i in rng.permutation(len(cut))]
        return batches

    @staticmethod
    def _remaining(indices, done: np.ndarray | None) -> list[int]:
        return list(indices) if done is None else [i for i in indices if not done[i]]

    def shard(self, batch: list[int]) -> list[int]:
        """This learner's part of a group batch."""
        return batch[self.rank :: self.num_replicas]

    def batches(self, epoch: int) -> list[list[int]]:
        """This learner's batches of the current plan."""
        return [self.shard(batch) for batch in self.global_batches(epoch, self.done)]

    def set_epoch(self, epoch: int, start: int = 0, done: np.ndarray | None = None) -> None:
        self.epoch = epoch
        self.start = start
        self.done = done if done is not None and done.any() else None

    def num_batches(self) -> int:
        """Batches in the current plan (a whole epoch's unless set_epoch had a `done` mask;
        the same every epoch: only the order of ties changes)."""
        return len(self.global_batches(self.epoch, self.done))

    def trained(self, epoch: int, done: np.ndarray | None, batch_indices: Sequence[int]) -> np.ndarray:
        """The mask of the utterances of `epoch` trained once `done` and the batches
        `batch_indices` of the plan that left out `done` are."""
        mask = np.zeros(len(self.lengths), dtype=bool) if done is None else done.copy()
        plan = self.global_batches(epoch, done if done is not None and done.any() else None)
        for i in batch_indices:
            mask[plan[i]] = True
        return mask

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches(self.epoch)[self.start :])

    def __len__(self) -> int:
        return max(0, self.num_batches() - self.start)


class ClaimedBatchSampler(Sampler[list[int]]):
    """The current plan's batches in the order learners claim them (ADPSGD, H-ADPSGD).

    `claim()` returns the next unclaimed batch of the plan for this learner's group (a node),
    first come first served over all groups, or None when the plan is used up; a faster group
    therefore trains more batches. `claimed` lists the plan indices this group took, in the
    order it hands them out: those read ahead but not yet trained are claimed too. (The trainer
    reads one batch ahead; DataLoader workers, train.num_workers > 0, fetch two each ahead.)
    """

    def __init__(self, sampler: BucketBatchSampler, claim):
        self.sampler = sampler
        self.claim = claim
        self.claimed: list[int] = []

    def __iter__(self) -> Iterator[list[int]]:
        plan = self.sampler.global_batches(self.sampler.epoch, self.sampler.done)
        while (index := self.claim(len(plan))) is not None:
            self.claimed.append(index)
            yield self.sampler.shard(plan[index])

    def __len__(self) -> int:
        return self.sampler.num_batches()


def pack_mask(mask: np.ndarray) -> Tensor:
    """A boolean mask over utterances as a uint8 tensor (8 per byte), for checkpoints."""
    return torch.from_numpy(np.packbits(mask))


def unpack_mask(packed: Tensor, size: int) -> np.ndarray:
    return np.unpackbits(packed.numpy(), count=size).astype(bool)


class Prefetcher:
    """Iterates `batches` on a thread of its own, at most `depth` batches ahead of the consumer,
    so that reading and collating the next batches overlaps the current step (reading arks and
    numpy release the GIL for most of the work). The thread takes the next batch from `batches`
    only once fewer than `depth` wait, so under claims (ClaimedBatchSampler) a batch is claimed
    no earlier than that. An exception on the thread is raised where the batch was due."""

    _END = object()

    def __init__(self, batches, depth: int = 2):
        self.queue: queue.Queue = queue.Queue()
        self.slots = threading.Semaphore(max(1, depth))  # batches read ahead and not yet taken
        self.thread = threading.Thread(target=self._fill, args=(iter(batches),), name="asr-prefetch", daemon=True)
        self.stopped = threading.Event()
        self.thread.start()

    def _fill(self, batches) -> None:
        try:
            while self._reserve():
                batch = next(batches, self._END)
                self.queue.put(batch)
                if batch is self._END:
                    return
        except BaseException as err:  # handed to the consumer
            self.queue.put(err)

    def _reserve(self) -> bool:
        while not self.stopped.is_set():
            if self.slots.acquire(timeout=0.1):
                return True
        return False

    def __iter__(self) -> "Prefetcher":
        return self

    def __next__(self):
        item = self.queue.get()
        self.slots.release()
        if item is self._END:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        """Stop early (the consumer broke out of the loop): the thread ends after its batch."""
        self.stopped.set()
        self.thread.join(timeout=60)
