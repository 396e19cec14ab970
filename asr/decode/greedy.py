"""CTC greedy search over a batch of log-probabilities.

Best path: the most likely token at each frame, repeats collapsed, blanks dropped. Each
surviving token is placed at the frame where its run starts (its CTC "emission"). A beam
search returns the same `Hypothesis` so word timing and output code serve both.
"""

from __future__ import annotations

import torch
from torch import Tensor

from asr.decode.hypothesis import Hypothesis  # noqa: F401  (re-exported: the type lives there, torch-free)


def ctc_greedy(log_probs: Tensor, lengths: Tensor, blank: int = 0) -> list[Hypothesis]:
    """log_probs (B, T, V), lengths (B,) -> one Hypothesis per utterance."""
    best_logp, best = log_probs.detach().float().cpu().max(dim=-1)
    hyps = []
    for b in range(log_probs.shape[0]):
        n = int(lengths[b])
        path = best[b, :n]
        # A token is emitted where it differs from the previous frame's best and is not blank.
        starts = torch.ones(n, dtype=torch.bool)
        starts[1:] = path[1:] != path[:-1]
        emitted = torch.nonzero(starts & (path != blank)).flatten()
        hyps.append(
            Hypothesis(
                tokens=path[emitted].tolist(),
                frames=emitted.tolist(),
                probs=best_logp[b, emitted].exp().tolist(),
            )
        )
    return hyps
