"""CTC greedy search on hand-made log-probabilities."""

import math

import torch

from asr.decode.greedy import ctc_greedy


def log_probs_for(paths: list[list[int]], vocab: int = 5, peak: float = 0.9) -> torch.Tensor:
    """(B, T, V) log-probs whose best path is `paths[b]` (padded with token 4 = junk)."""
    T = max(map(len, paths))
    probs = torch.full((len(paths), T, vocab), (1 - peak) / (vocab - 1))
    for b, path in enumerate(paths):
        for t in range(T):
            probs[b, t, path[t] if t < len(path) else 4] = peak
    return probs.log()


def test_collapses_repeats_drops_blanks_and_keeps_first_frames():
    #        frame: 0  1  2  3  4  5  6  7  8
    path = [0, 1, 1, 0, 1, 2, 2, 0, 3]
    (hyp,) = ctc_greedy(log_probs_for([path]), torch.tensor([9]))
    assert hyp.tokens == [1, 1, 2, 3]  # a blank between two 1s keeps both
    assert hyp.frames == [1, 4, 5, 8]
    assert all(math.isclose(p, 0.9, rel_tol=1e-6) for p in hyp.probs)


def test_lengths_cut_off_padding():
    lp = log_probs_for([[0, 2, 0, 3, 3, 1], [3, 0, 0]])
    a, b = ctc_greedy(lp, torch.tensor([6, 3]))
    assert a.tokens == [2, 3, 1] and a.frames == [1, 3, 5]
    assert b.tokens == [3] and b.frames == [0]  # token 4 in its padded frames is ignored
    (empty,) = ctc_greedy(log_probs_for([[0, 0, 0]]), torch.tensor([3]))
    assert empty.tokens == [] and empty.frames == []
