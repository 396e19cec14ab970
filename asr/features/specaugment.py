"""SpecAugment-style masking of training features (Park et al. 2019, without time warping),
with an optional VTLP-style frequency warp (Jaitly and Hinton 2013).

Applied to an utterance's normalised features (T, D) in the training loader. The warp comes
first: the feature axis is stretched by a factor alpha drawn uniformly from 1 +- `freq_warp`,
piecewise linearly so that the top bin stays in place (VTLP's shape, on the mel-bin axis
rather than in Hz), which imitates a shorter or longer vocal tract. Then `freq_masks`
bands of at most `freq_width` consecutive dimensions and `time_masks` runs of at most
`time_width` frames (and at most `time_ratio` of the utterance) are set to zero, which after
CMVN is the mean. Random numbers come from torch's generator, so a resumed run that restores
the RNG state draws the same masks. Off (the identity) when both counts are 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass(frozen=True)
class SpecAugment:
    freq_masks: int = 0
    freq_width: int = 10
    time_masks: int = 0
    time_width: int = 40
    time_ratio: float = 0.2
    freq_warp: float = 0.0

    @classmethod
    def from_config(cls, cfg: Any) -> "SpecAugment | None":
        """The masker of a features.specaugment config, or None when it masks nothing."""
        if cfg is None or (cfg.freq_masks <= 0 and cfg.time_masks <= 0 and cfg.freq_warp <= 0):
            return None
        return cls(cfg.freq_masks, cfg.freq_width, cfg.time_masks, cfg.time_width, cfg.time_ratio, cfg.freq_warp)

    def __call__(self, feats: Tensor, generator: torch.Generator | None = None) -> Tensor:
        frames, dim = feats.shape
        out = feats.clone()
        if self.freq_warp > 0:
            alpha = 1.0 + self.freq_warp * (2.0 * float(torch.rand(1, generator=generator)) - 1.0)
            out = warp_frequency(out, alpha)
        for _ in range(self.freq_masks):
            start, width = _band(dim, self.freq_width, generator)
            out[:, start : start + width] = 0.0
        longest = min(self.time_width, int(self.time_ratio * frames))
        for _ in range(self.time_masks):
            start, width = _band(frames, longest, generator)
            out[start : start + width, :] = 0.0
        return out


def _band(size: int, max_width: int, generator: torch.Generator | None) -> tuple[int, int]:
    """A random [start, start + width) inside [0, size) with width uniform in 0..max_width."""
    max_width = max(0, min(max_width, size))
    width = int(torch.randint(0, max_width + 1, (1,), generator=generator))
    start = int(torch.randint(0, size - width + 1, (1,), generator=generator))
    return start, width


def warp_frequency(feats: Tensor, alpha: float, knee: float = 0.8) -> Tensor:
    """Features (T, D) with the last axis warped by `alpha`: output bin k reads input position
    alpha * k up to a knee, then a line that ends at the top bin (VTLP's piecewise warp).

    alpha > 1 moves spectral detail towards lower bins (as a longer vocal tract would), alpha < 1
    towards higher bins; values between bins are interpolated linearly.
    """
    dim = feats.shape[-1]
    top = float(dim - 1)
    if dim < 2 or alpha == 1.0:
        return feats
    bend = knee * top * min(alpha, 1.0) / alpha  # output position where the linear part ends
    k = torch.arange(dim, dtype=feats.dtype)
    source = torch.where(k <= bend, k * alpha, bend * alpha + (k - bend) * (top - bend * alpha) / (top - bend))
    source = source.clamp(0.0, top)
    low = source.floor().long().clamp(max=dim - 2)
    frac = source - low.to(feats.dtype)
    return feats[..., low] * (1.0 - frac) + feats[..., low + 1] * frac
