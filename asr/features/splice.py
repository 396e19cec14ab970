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
    frames' memory is then only ever a block's and an utterance's."""

    def __init__(self, utterances: Sequence[np.ndarray], left: int, right: int, block: int):
        self.utterances, self.left, self.right, self.block = utterances, left, right, block

    def __iter__(self) -> Iterator[np.ndarray]:
        out: np.ndarray | None = None
        filled = 0
        for feats in self.utterances:
            spliced = splice(feats, self.left, self.right)
            start = 0
            while start < spliced.shape[0]:
                if out is None:
                    out, filled = np.empty((self.block, spliced.shape[1]), spliced.dtype), 0
                take = min(self.block - filled, spliced.shape[0] - start)
                out[filled : filled + take] = spliced[start : start + take]
                filled, start = filled + take, start + take
                if filled == self.block:
                    yield out
                    out = None
        if out is not None:
            yield out[:filled]


def splice_opts(left: int, right: int) -> str:
    """The options in Kaldi's form, as steps/train_lda_mllt.sh keeps them in `splice_opts`."""
    return f"--left-context={left} --right-context={right}\n"
