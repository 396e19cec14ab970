"""Frame splicing as Kaldi's `splice-feats` does it: each output frame is the concatenation of
the frames t-left .. t+right, with the first/last frame repeated beyond the utterance's
edges, so the number of frames is unchanged."""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from asr.utils.errors import InputError


def splice(feats: np.ndarray, left: int, right: int) -> np.ndarray:
    """(T, D) -> (T, D * (left + 1 + right)), oldest frame first."""
    feats = np.asarray(feats)
    if feats.ndim != 2:
        raise ValueError(f"splice expects a (frames, dim) matrix, got shape {feats.shape}")
    if left < 0 or right < 0:
        raise InputError(f"splice: left={left} and right={right} must be >= 0")
    frames = feats.shape[0]
    if frames == 0:
        return np.zeros((0, feats.shape[1] * (left + 1 + right)), dtype=feats.dtype)
    index = np.clip(np.arange(frames)[:, None] + np.arange(-left, right + 1)[None, :], 0, frames - 1)
    return feats[index].reshape(frames, -1)


class SplicedBlocks:
    """Utterances spliced one by one and laid end to end, made in blocks of `block` frames (the
    last one shorter) each time it is iterated, instead of held: (left + 1 + right) times the
    frames' memory is then only ever a block's."""

    def __init__(self, utterances: Sequence[np.ndarray], left: int, right: int, block: int):
        self.utterances, self.left, self.right, self.block = utterances, left, right, block

    def __iter__(self) -> Iterator[np.ndarray]:
        pending: list[np.ndarray] = []
        size = 0
        for feats in self.utterances:
            pending.append(splice(feats, self.left, self.right))
            size += pending[-1].shape[0]
            while size >= self.block:
                joined = np.concatenate(pending)
                yield joined[: self.block]
                pending, size = [joined[self.block :]], size - self.block
        if size:
            yield np.concatenate(pending)


def splice_opts(left: int, right: int) -> str:
    """The options in Kaldi's form, as steps/train_lda_mllt.sh keeps them in `splice_opts`."""
    return f"--left-context={left} --right-context={right}\n"
