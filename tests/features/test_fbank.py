"""asr.features.logmel.fbank against kaldi-native-fbank (k2-fsa's C++ port of Kaldi's fbank).

Our spectrum is computed in float64 (exact to ~1e-12 on any CPU), so what separates our
features from the reference is the reference's own float32 round-off. The bounds below come
from the arithmetic, not from one machine's output.
"""

import math

import numpy as np
import pytest
import torch

kaldi_native_fbank = pytest.importorskip("kaldi_native_fbank")

from asr.features.config import FeaturesConfig  # noqa: E402
from asr.features.logmel import fbank as fbank_module  # noqa: E402
from asr.features.logmel.fbank import INT16_SCALE, fbank, fbank_batch  # noqa: E402
from asr.features.logmel.options import FbankOptions, num_frames  # noqa: E402
from asr.utils.errors import InputError  # noqa: E402

TOLERANCE = 1e-3  # the same numbers as compute-fbank-feats within 1e-3
FLOAT32_EPS = float(np.finfo(np.float32).eps)


def kaldi_fbank(samples: np.ndarray, opts: FbankOptions) -> np.ndarray:
    """Reference features of float samples in [-1, 1), fed to Kaldi at int16 scale."""
    ref = kaldi_native_fbank.FbankOptions()
    frame, mel = ref.frame_opts, ref.mel_opts
    frame.samp_freq = opts.sample_frequency
    frame.frame_length_ms, frame.frame_shift_ms = opts.frame_length_ms, opts.frame_shift_ms
    frame.dither = 0.0
    frame.preemph_coeff = opts.preemphasis_coefficient
    frame.remove_dc_offset = opts.remove_dc_offset
    frame.window_type = opts.window_type
    frame.round_to_power_of_two = opts.round_to_power_of_two
    frame.blackman_coeff = opts.blackman_coeff
    frame.snip_edges = opts.snip_edges
    mel.num_bins, mel.low_freq, mel.high_freq = opts.num_mel_bins, opts.low_freq, opts.high_freq
    ref.use_energy, ref.energy_floor, ref.raw_energy = opts.use_energy, opts.energy_floor, opts.raw_energy
    ref.htk_compat, ref.use_log_fbank, ref.use_power = opts.htk_compat, opts.use_log_fbank, opts.use_power
    computer = kaldi_native_fbank.OnlineFbank(ref)
    computer.accept_waveform(opts.sample_frequency, (samples * INT16_SCALE).tolist())
    computer.input_finished()
    frames = [computer.get_frame(i) for i in range(computer.num_frames_ready)]
    return np.array(frames, dtype=np.float32).reshape(len(frames), opts.dim)


def noise(rate: int, seconds: float, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(int(rate * seconds)) * 0.1).astype(np.float32)


def sines_and_noise(rate: int, seconds: float, seed: int = 0) -> np.ndarray:
    """Two tones, a chirp and a noise floor 30-40 dB down, quantised to int16 like real audio."""
    t = np.arange(int(rate * seconds)) / rate
    x = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.1 * np.sin(2 * np.pi * 1234 * t)
    x += 0.05 * np.sin(2 * np.pi * (200 + 1500 * t) * t) + 0.01 * np.random.default_rng(seed).standard_normal(len(t))
    return (np.round(x * INT16_SCALE) / INT16_SCALE).astype(np.float32)


OPTION_SETS = [
    dict(sample_frequency=8000, num_mel_bins=40),
    dict(sample_frequency=8000, num_mel_bins=80, snip_edges=False),
    dict(sample_frequency=16000, num_mel_bins=80, window_type="hamming"),
    dict(sample_frequency=16000, num_mel_bins=40, window_type="hanning", snip_edges=False),
    dict(sample_frequency=8000, num_mel_bins=40, window_type="rectangular", use_energy=True),
    dict(sample_frequency=16000, num_mel_bins=80, window_type="blackman", use_energy=True, raw_energy=False),
    dict(sample_frequency=8000, num_mel_bins=80, window_type="sine", low_freq=64, high_freq=-200),
    dict(
        sample_frequency=16000,
        num_mel_bins=40,
        low_freq=100,
        high_freq=7000,
        snip_edges=False,
        use_energy=True,
        htk_compat=True,
        energy_floor=1.0,
    ),
    dict(sample_frequency=8000, num_mel_bins=40, frame_length_ms=20, frame_shift_ms=8, round_to_power_of_two=False),
    dict(sample_frequency=8000, num_mel_bins=23, use_power=False, remove_dc_offset=False, preemphasis_coefficient=0.0),
]


def option_id(values: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in values.items())


@pytest.mark.parametrize("values", OPTION_SETS, ids=option_id)
def test_matches_kaldi_on_noise(values):
    opts = FbankOptions(**values)
    samples = noise(int(opts.sample_frequency), 1.03)
    ours = fbank(samples, opts).numpy()
    ref = kaldi_fbank(samples, opts)
    assert ours.shape == ref.shape
    assert np.abs(ours - ref).max() < TOLERANCE


def float32_log_error_bound(samples: np.ndarray, opts: FbankOptions) -> np.ndarray:
    """How far a float32 computation of each log-mel value (Kaldi's) can be from the exact one.

    From the standard error analysis: the processed frame y (DC removal's mean over n samples,
    pre-emphasis, window) carries relative round-off of about (n + 8) eps, and a radix-2 FFT
    of length N is normwise backward stable with ||dX|| <= 7 eps log2(N) ||X|| (Higham,
    Accuracy and Stability of Numerical Algorithms, Thm 24.2; ||X|| = sqrt(N) ||y||). Any one
    bin's error is at most that norm, d; its power |X_k|^2 then errs by up to 2 |X_k| d + d^2,
    a mel energy m by the weighted sum of those plus its own summation's round-off, and log m
    by -log(1 - dm / m). Cells where dm reaches m / 2 have no useful bound (inf): there the
    reference's value is round-off. Returns (frames, num_mel_bins) bounds, from our exact frames.
    """
    waveform = torch.from_numpy(samples).double()[None]
    lengths = torch.tensor([len(samples)])
    frames = fbank_module._cut_frames(waveform, lengths, int(num_frames(lengths, opts)[0]), opts, INT16_SCALE)
    y = fbank_module._process_frames(frames, opts, None)[0][0]
    n = opts.padded_window_length
    magnitude = torch.fft.rfft(y, n=n).abs()
    mel = torch.from_numpy(fbank_module.mel_banks(opts))
    eta = (7 * math.log2(n) + opts.window_length + 8) * FLOAT32_EPS
    d = eta * math.sqrt(n) * y.norm(dim=-1, keepdim=True)
    energy = (magnitude**2 if opts.use_power else magnitude) @ mel
    d_power = 2 * magnitude * d + d**2 if opts.use_power else d.expand_as(magnitude)
    d_energy = d_power @ mel + 2 * mel.shape[0] * FLOAT32_EPS * energy
    relative = (d_energy / energy).numpy()
    return np.where(relative < 0.5, -np.log1p(-np.minimum(relative, 0.5)), np.inf)


@pytest.mark.parametrize("values", OPTION_SETS, ids=option_id)
def test_matches_kaldi_on_tones(values):
    opts = FbankOptions(**values)
    samples = sines_and_noise(int(opts.sample_frequency), 1.27)
    ours = fbank(samples, opts).numpy()
    ref = kaldi_fbank(samples, opts)
    assert ours.shape == ref.shape
    error = np.abs(ours - ref)
    # Kaldi compatibility: within 1e-3 in every cell within 20 nats (87 dB) of its frame's
    # strongest bin; below that the reference's float32 FFT round-off grows towards 1e-3.
    within_20_nats = ref >= ref.max(axis=1, keepdims=True) - 20.0
    assert error[within_20_nats].max() < TOLERANCE
    # Everywhere else: within what float32 arithmetic allows the reference.
    bound = float32_log_error_bound(samples, opts)
    if opts.use_energy:  # the log energy (a sum of squares) is accurate to a few eps
        mel_columns = slice(0, -1) if opts.htk_compat else slice(1, None)
        assert error[:, 0 if not opts.htk_compat else -1].max() < TOLERANCE
        error, ref = error[:, mel_columns], ref[:, mel_columns]
    bounded = np.isfinite(bound)
    assert bounded.mean() > 0.95, "the test signal should keep most cells above float32 round-off"
    assert (error[bounded] <= TOLERANCE + bound[bounded]).all(), (error - bound)[bounded].max()


def test_float32_features_are_the_float64_ones_rounded_once():
    """Everything up to the log is computed in float64 from the same samples, so float32 output
    is float64 output rounded: no float32 round-off (which follows the CPU's kernels) in between."""
    opts = FbankOptions(sample_frequency=8000, num_mel_bins=80)
    samples = noise(8000, 0.5)
    single = fbank(samples, opts)
    double = fbank(torch.from_numpy(samples).double(), opts)
    assert single.dtype == torch.float32 and double.dtype == torch.float64
    assert torch.equal(single, double.float())


def test_float32_spectrum_option_stays_within_float32_round_off():
    """compute_dtype=float32 (the faster, kernel-dependent path) stays within the same bound."""
    opts = FbankOptions(sample_frequency=8000, num_mel_bins=40)
    samples = sines_and_noise(8000, 0.6)
    exact = fbank(samples, opts).numpy()
    fast, _ = fbank_batch(torch.from_numpy(samples)[None], None, opts, compute_dtype=torch.float32)
    bound = float32_log_error_bound(samples, opts)
    bounded = np.isfinite(bound)
    assert (np.abs(fast[0].numpy() - exact)[bounded] <= 1e-5 + bound[bounded]).all()


@pytest.mark.parametrize("snip_edges", [True, False])
def test_batch_equals_one_by_one(snip_edges):
    opts = FbankOptions(sample_frequency=8000, num_mel_bins=40, snip_edges=snip_edges, use_energy=True)
    waves = [noise(8000, s, seed=i) for i, s in enumerate([0.61, 0.2, 0.437, 0.021])]
    padded = torch.zeros(len(waves), max(len(w) for w in waves))
    for row, w in enumerate(waves):
        padded[row, : len(w)] = torch.from_numpy(w)
    lengths = torch.tensor([len(w) for w in waves])
    feats, counts = fbank_batch(padded, lengths, opts)
    assert feats.shape == (4, int(counts.max()), 41)
    for row, w in enumerate(waves):
        alone = fbank(w, opts)
        assert int(counts[row]) == alone.shape[0] == num_frames(len(w), opts)
        assert torch.equal(feats[row, : alone.shape[0]], alone)  # the same bits in any batch
        assert (feats[row, alone.shape[0] :] == 0).all()  # padding frames are zero


def kaldi_frame_count(n: int, length: int, shift: int, snip_edges: bool) -> int:
    """feature-window.cc, NumFrames(num_samples, opts, flush=true)."""
    if snip_edges:
        return 0 if n < length else 1 + (n - length) // shift
    return (n + shift // 2) // shift


@pytest.mark.parametrize("snip_edges", [True, False])
def test_frame_counts_follow_kaldi(snip_edges):
    opts = FbankOptions(sample_frequency=8000, snip_edges=snip_edges)
    assert (opts.window_length, opts.window_shift, opts.padded_window_length) == (200, 80, 256)
    lengths = [0, 1, 39, 40, 79, 199, 200, 201, 279, 280, 281, 8000, 12345]
    expected = [kaldi_frame_count(n, 200, 80, snip_edges) for n in lengths]
    assert [num_frames(n, opts) for n in lengths] == expected
    assert num_frames(torch.tensor(lengths), opts).tolist() == expected
    assert [kaldi_fbank(np.zeros(n, np.float32) + 0.01, opts).shape[0] for n in lengths[:9]] == expected[:9]
    if snip_edges:
        assert expected[:8] == [0, 0, 0, 0, 0, 0, 1, 1]
    else:
        assert expected[:8] == [0, 0, 0, 1, 1, 2, 3, 3]


def test_empty_and_short_inputs_give_no_frames():
    opts = FbankOptions(sample_frequency=8000, num_mel_bins=40)
    assert fbank(np.zeros(100, np.float32), opts).shape == (0, 40)
    feats, counts = fbank_batch(torch.zeros(2, 150), torch.tensor([150, 0]), opts)
    assert feats.shape == (2, 0, 40) and counts.tolist() == [0, 0]


def test_silence_is_floored_at_float_epsilon():
    opts = FbankOptions(sample_frequency=8000, num_mel_bins=40, use_energy=True)
    feats = fbank(np.zeros(800, np.float32), opts)
    assert torch.allclose(feats, torch.full_like(feats, float(np.log(np.finfo(np.float32).eps))))
    floored = fbank(np.zeros(800, np.float32), FbankOptions(sample_frequency=8000, use_energy=True, energy_floor=2.0))
    assert torch.allclose(floored[:, 0], torch.full((floored.shape[0],), float(np.log(2.0))))


def test_int16_scale_input_with_unit_scale():
    opts = FbankOptions(sample_frequency=8000, num_mel_bins=40)
    samples = noise(8000, 0.3)
    assert torch.allclose(fbank(samples, opts), fbank(samples * INT16_SCALE, opts, sample_scale=1.0), atol=1e-4)
    # The scale only shifts log-mel values, by log(32768^2).
    shift = fbank(samples, opts) - fbank(samples, opts, sample_scale=1.0)
    assert torch.allclose(shift, torch.full_like(shift, 2 * np.log(INT16_SCALE)), atol=1e-3)


def test_options_from_config_and_kaldi_conf():
    opts = FbankOptions.from_config(FeaturesConfig(num_mel_bins=40, snip_edges=False))
    assert (opts.sample_frequency, opts.num_mel_bins, opts.snip_edges, opts.dim) == (8000.0, 40, False, 40)
    conf = opts.to_kaldi_conf().splitlines()
    assert "--num-mel-bins=40" in conf and "--frame-length=25" in conf and "--snip-edges=false" in conf
    assert "--sample-frequency=8000" in conf and "--dither=0" in conf and len(conf) == 19


@pytest.mark.parametrize(
    "values, message",
    [
        (dict(window_type="gauss"), "window_type"),
        (dict(sample_frequency=8000, high_freq=5000), "high_freq"),
        (dict(sample_frequency=8000, low_freq=4000), "low_freq"),
        (dict(num_mel_bins=2), "num_mel_bins"),
        (dict(frame_shift_ms=0.01), "frame_shift_ms"),
    ],
)
def test_bad_options_raise_input_error(values, message):
    with pytest.raises(InputError, match=message):
        FbankOptions(**values)
