"""Log-mel filterbank features with the same numbers as Kaldi's `compute-fbank-feats`.

Written in torch, so it runs on CPU and GPU tensors, and batched: a batch of padded
waveforms with their lengths gives padded features with their frame counts. Per frame it
does what Kaldi's FeatureWindow/FbankComputer do, in the same order:

  cut frames (snip_edges, or centred frames with the signal reflected at both edges)
  -> [dither] -> remove DC offset -> [raw log energy] -> pre-emphasis -> window
  -> [log energy] -> zero-pad to a power of two -> |rfft|^2 -> mel banks -> log(max(x, eps))

Samples: soundfile returns float in [-1, 1), Kaldi reads 16-bit integers. The samples are
multiplied by `sample_scale` (default 32768, `INT16_SCALE`) first, so the numbers equal
Kaldi's; the scale adds the constant log(32768^2) to every log-mel value, and it also
decides where the FLT_EPSILON floor and `energy_floor` bite. Pass 1 for int16-scale input.

Precision: everything up to the floored log is computed in float64 and rounded to the input's
dtype once, at the end. A float32 FFT's or matmul's round-off depends on the kernel that the
CPU's instruction set, the thread count and the batch's shape select (MKL on AVX2, AVX512, AMX,
...): the float32 spectrum is off by up to 1e-3 nats in a mel bin far below its frame's
strongest one, and a float32 mel matmul changes the last bit with the number of frames in the
batch. In float64 these differences are float64 round-off and vanish in the final rounding
(but for a value that falls within float64 round-off of a float32 rounding boundary, which can
round either way), so an utterance's features have the same bits on every CPU, with any number
of threads or parallel jobs, alone or in any batch, and differ from Kaldi's only by Kaldi's own
float32 round-off.
The features benchmark times this against an all-float32 computation
(`compute_dtype=torch.float32`, whose last digits depend on the CPU).

VTLN is not implemented (Kaldi's default, warp factor 1). Dither draws torch's random
numbers, so with dither > 0 values match Kaldi only in distribution.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from asr.features.logmel.options import WINDOW_TYPES, FbankOptions, num_frames
from asr.utils.errors import InputError

INT16_SCALE = 32768.0
# Kaldi floors energies at std::numeric_limits<float>::epsilon() before taking the log.
FLT_EPSILON = float(np.finfo(np.float32).eps)


def fbank(waveform: torch.Tensor | np.ndarray, opts: FbankOptions, sample_scale: float = INT16_SCALE) -> torch.Tensor:
    """Features (frames x dim) of one waveform (1-D)."""
    waveform = torch.as_tensor(waveform)
    if waveform.dim() != 1:
        raise ValueError(f"fbank expects a 1-D waveform, got shape {tuple(waveform.shape)}")
    feats, counts = fbank_batch(waveform[None], None, opts, sample_scale)
    return feats[0, : int(counts[0])]


def fbank_batch(
    waveforms: torch.Tensor,
    lengths: torch.Tensor | None,
    opts: FbankOptions,
    sample_scale: float = INT16_SCALE,
    generator: torch.Generator | None = None,
    compute_dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Features of a batch of padded waveforms.

    waveforms: (batch, samples), float, padded at the end; lengths: (batch,) valid samples
    (None: all full length). Returns (batch, max_frames, dim) features, zero past each
    utterance's frame count, and the frame counts (batch,), on the waveforms' device.
    The dtype is the waveforms'; the arithmetic is in `compute_dtype` (see the module's doc).
    """
    if waveforms.dim() != 2:
        raise ValueError(f"fbank_batch expects (batch, samples), got shape {tuple(waveforms.shape)}")
    if not waveforms.is_floating_point():
        waveforms = waveforms.float()
    batch, device, dtype = waveforms.shape[0], waveforms.device, waveforms.dtype
    if lengths is None:
        lengths = torch.full((batch,), waveforms.shape[1], dtype=torch.long, device=device)
    lengths = lengths.to(device=device, dtype=torch.long)
    counts = num_frames(lengths, opts)
    max_frames = int(counts.max()) if batch else 0
    if max_frames == 0:
        return waveforms.new_zeros((batch, 0, opts.dim)), counts

    frames = _cut_frames(waveforms.to(compute_dtype), lengths, max_frames, opts, sample_scale)
    frames, log_energy = _process_frames(frames, opts, generator)
    feats = _mel_energies(frames, opts)
    if opts.use_energy:
        feats = _attach_energy(feats, log_energy, opts)
    valid = torch.arange(max_frames, device=device)[None, :] < counts[:, None]
    return feats.masked_fill(~valid[:, :, None], 0.0).to(dtype), counts


def _cut_frames(
    waveforms: torch.Tensor, lengths: torch.Tensor, max_frames: int, opts: FbankOptions, sample_scale: float
) -> torch.Tensor:
    """(batch, max_frames, window_length) frames, scaled; a strided view where possible."""
    length, shift = opts.window_length, opts.window_shift
    span = (max_frames - 1) * shift + length  # samples the frames cover
    if opts.snip_edges:
        signal = waveforms[:, :span]  # the longest utterance has at least `span` samples
    else:
        # Frame f is centred on f*shift + shift/2; samples outside [0, n) are reflected
        # (-1 -> 0, n -> n-1), per utterance since each has its own end.
        first = shift // 2 - length // 2
        positions = torch.arange(first, first + span, device=waveforms.device)[None, :]
        n = lengths.clamp(min=1)[:, None]
        folded = positions % (2 * n)  # reflection at both ends is periodic with period 2n
        index = torch.where(folded < n, folded, 2 * n - 1 - folded)
        signal = waveforms.gather(1, index)
    return (signal * sample_scale).unfold(1, length, shift)


def _process_frames(
    frames: torch.Tensor, opts: FbankOptions, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Kaldi's ProcessWindow: dither, DC removal, energy, pre-emphasis, window; the frames come
    back zero-padded to padded_window_length, worked on in place (a third faster than a new
    tensor per operation)."""
    length = frames.shape[-1]
    padded = frames.new_zeros(frames.shape[:-1] + (opts.padded_window_length,))
    out = padded[..., :length]
    out.copy_(frames)
    if opts.dither != 0.0:
        out.add_(
            torch.randn(frames.shape, generator=generator, device=frames.device, dtype=frames.dtype), alpha=opts.dither
        )
    if opts.remove_dc_offset:
        out.sub_(out.mean(dim=-1, keepdim=True))
    log_energy = None
    if opts.use_energy and opts.raw_energy:
        log_energy = _log_energy(out)
    if opts.preemphasis_coefficient != 0.0:
        # x[i] -= c * x[i-1], and x[0] -= c * x[0] (Kaldi's convention for the first sample);
        # the right-hand side is a new tensor, so every x[i-1] is the value before the update.
        c = opts.preemphasis_coefficient
        out[..., 1:].sub_(out[..., :-1] * c)
        out[..., :1].mul_(1.0 - c)
    out.mul_(_window(opts, frames.device, frames.dtype))
    if opts.use_energy and not opts.raw_energy:
        log_energy = _log_energy(out)
    return padded, log_energy


def _log_energy(frames: torch.Tensor) -> torch.Tensor:
    return frames.pow(2).sum(dim=-1).clamp(min=FLT_EPSILON).log()


def _mel_energies(frames: torch.Tensor, opts: FbankOptions) -> torch.Tensor:
    """One rfft over all (padded) frames, one matmul with the mel matrix and the floored log, all
    in the frames' dtype (the caller rounds to the output dtype)."""
    spectrum = torch.fft.rfft(frames)  # already zero-padded to padded_window_length
    power = torch.view_as_real(spectrum).pow(2).sum(-1)
    if not opts.use_power:
        power = power.sqrt()
    mel = power @ _mel_matrix(opts, frames.device, power.dtype)
    if opts.use_log_fbank:
        mel = mel.clamp(min=FLT_EPSILON).log()
    return mel


def _attach_energy(feats: torch.Tensor, log_energy: torch.Tensor | None, opts: FbankOptions) -> torch.Tensor:
    assert log_energy is not None
    if opts.energy_floor > 0.0:
        log_energy = log_energy.clamp(min=math.log(opts.energy_floor))
    parts = [feats, log_energy[..., None]] if opts.htk_compat else [log_energy[..., None], feats]
    return torch.cat(parts, dim=-1)


@functools.lru_cache(maxsize=32)
def _window(opts: FbankOptions, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(window_function(opts)).to(device=device, dtype=dtype)


@functools.lru_cache(maxsize=32)
def _mel_matrix(opts: FbankOptions, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(mel_banks(opts)).to(device=device, dtype=dtype)


def window_function(opts: FbankOptions) -> np.ndarray:
    """Kaldi's FeatureWindowFunction (computed in double, as Kaldi does)."""
    n = opts.window_length
    a = 2 * math.pi / (n - 1)
    i = np.arange(n, dtype=np.float64)
    kind = opts.window_type
    if kind == "hanning":
        return 0.5 - 0.5 * np.cos(a * i)
    if kind == "sine":
        return np.sin(0.5 * a * i)  # the square root of the hanning window
    if kind == "hamming":
        return 0.54 - 0.46 * np.cos(a * i)
    if kind == "povey":
        return (0.5 - 0.5 * np.cos(a * i)) ** 0.85  # like hamming, but goes to zero at the edges
    if kind == "rectangular":
        return np.ones(n)
    if kind == "blackman":
        c = opts.blackman_coeff
        return c - 0.5 * np.cos(a * i) + (0.5 - c) * np.cos(2 * a * i)
    raise InputError(f"window_type={kind!r} is not one of {WINDOW_TYPES}")


def mel_scale(freq: np.ndarray | float) -> np.ndarray | float:
    return 1127.0 * np.log(1.0 + np.asarray(freq) / 700.0)


def mel_banks(opts: FbankOptions) -> np.ndarray:
    """Kaldi's MelBanks (no VTLN) as a (padded_window_length/2 + 1, num_mel_bins) matrix.

    Triangles are equally spaced on Kaldi's mel scale between low_freq and high_freq and are
    evaluated at the FFT bin centres. Kaldi ignores the Nyquist bin; its row is zero here so
    the matrix applies to the whole rfft output.
    """
    num_fft_bins = opts.padded_window_length // 2
    mel_low, mel_high = mel_scale(opts.low_freq), mel_scale(opts.resolved_high_freq)
    delta = (mel_high - mel_low) / (opts.num_mel_bins + 1)
    left = mel_low + delta * np.arange(opts.num_mel_bins)[None, :]
    centre, right = left + delta, left + 2 * delta
    bin_width = opts.sample_frequency / opts.padded_window_length
    mel = mel_scale(bin_width * np.arange(num_fft_bins))[:, None]
    rising, falling = (mel - left) / (centre - left), (right - mel) / (right - centre)
    weights = np.where(mel <= centre, rising, falling)
    weights = np.where((mel > left) & (mel < right), weights, 0.0)
    return np.concatenate([weights, np.zeros((1, opts.num_mel_bins))], axis=0)
