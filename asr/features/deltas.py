"""Delta features as Kaldi's `add-deltas` computes them (DeltaFeatures in feature-functions.cc).

The order-k coefficients are a fixed filter over 2*k*window+1 frames: order 1 is the usual
regression sum_{j=-w..w} j x[t+j] / (2 sum_{j=1..w} j^2), and order k applies that filter
to the order k-1 filter (their convolution). Frames outside the utterance are the first or
last frame repeated, as Kaldi does. The output is [x, delta, delta-delta, ...] per frame.
"""

from __future__ import annotations

import functools

import numpy as np

from asr.utils.errors import InputError


@functools.lru_cache(maxsize=16)
def delta_scales(order: int, window: int) -> tuple[np.ndarray, ...]:
    """Filter taps for orders 0..order, each centred (length 2*k*window + 1 for order k)."""
    if order < 0 or window < 1:
        raise InputError(
            f"deltas: order={order} must be >= 0 and window={window} >= 1 (features.delta_order/delta_window)"
        )
    taps = np.arange(-window, window + 1, dtype=np.float64)
    regression = taps / (taps * taps).sum()  # sum j^2 over -w..w = 2 sum_{j=1..w} j^2
    scales = [np.ones(1)]
    for _ in range(order):
        scales.append(np.convolve(scales[-1], regression))
    return tuple(scales)


def add_deltas(feats: np.ndarray, order: int = 2, window: int = 2) -> np.ndarray:
    """(T, D) -> (T, D * (order + 1)): the features followed by their deltas of each order."""
    feats = np.asarray(feats)
    if feats.ndim != 2:
        raise ValueError(f"add_deltas expects a (frames, dim) matrix, got shape {feats.shape}")
    if feats.shape[0] == 0:
        return np.zeros((0, feats.shape[1] * (order + 1)), dtype=feats.dtype)
    if order == 0:
        return feats.copy()
    scales = delta_scales(order, window)
    reach = order * window
    padded = np.pad(feats.astype(np.float64), ((reach, reach), (0, 0)), mode="edge")
    frames = feats.shape[0]
    blocks = [feats.astype(np.float64)]
    for taps in scales[1:]:
        half = len(taps) // 2
        out = np.zeros(feats.shape, dtype=np.float64)
        for offset, weight in zip(range(-half, half + 1), taps):
            if weight != 0.0:
                out += weight * padded[reach + offset : reach + offset + frames]
        blocks.append(out)
    return np.concatenate(blocks, axis=1).astype(feats.dtype, copy=False)


def delta_opts(order: int, window: int) -> str:
    """The options in Kaldi's form (`add-deltas --delta-order=2 --delta-window=2`)."""
    return f"--delta-order={order} --delta-window={window}\n"
