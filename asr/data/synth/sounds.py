"""Non-speech sounds of a telephone conversation, made from noise and harmonics.

They stand behind the MS98 tags: `[noise]` (a bump, a click, a rustle), `[laughter]` (a few
breathy voiced "ha" pulses) and `[laughter-word]` (a word spoken while laughing). The
`[vocalized-noise]` "hmm" is spoken by eSpeak in the speaker's own voice instead.
All functions return float32 at `rate`, scaled to a given RMS level.
"""

from __future__ import annotations

import numpy as np
from scipy import signal


def _at_level(x: np.ndarray, rms: float) -> np.ndarray:
    current = float(np.sqrt(np.mean(x.astype(np.float64) ** 2))) or 1.0
    return (x * (rms / current)).astype(np.float32)


def noise_burst(rng: np.random.Generator, rate: int, rms: float) -> np.ndarray:
    """A handset bump (short, low), a click (very short, bright) or a rustle (long, soft)."""
    kind = int(rng.integers(3))
    if kind == 0:
        seconds, band, decay = rng.uniform(0.08, 0.2), (80.0, 900.0), 25.0
    elif kind == 1:
        seconds, band, decay = rng.uniform(0.03, 0.06), (1500.0, 3800.0), 90.0
    else:
        seconds, band, decay = rng.uniform(0.25, 0.6), (400.0, 3500.0), 0.0
    n = int(seconds * rate)
    t = np.arange(n) / rate
    sos = signal.butter(2, band, btype="band", fs=rate, output="sos")
    x = signal.sosfilt(sos, rng.standard_normal(n))
    if decay:
        envelope = np.exp(-decay * t)
    else:
        envelope = np.sin(np.pi * t / seconds) ** 2  # a smooth swell for the rustle
    return _at_level(x * envelope, rms)


def _voiced_pulse(rng: np.random.Generator, rate: int, f0: float, seconds: float) -> np.ndarray:
    """One "ha": harmonics of a falling f0 with an open-vowel tilt, plus aspiration."""
    n = int(seconds * rate)
    t = np.arange(n) / rate
    f0_track = f0 * (1.0 + 0.15 * (1.0 - t / seconds))
    phase = 2 * np.pi * np.cumsum(f0_track) / rate
    voiced = sum(np.sin(k * phase) / k**1.2 for k in range(1, int(3400 / (1.3 * f0))))
    breath = signal.sosfilt(signal.butter(2, [600, 3000], btype="band", fs=rate, output="sos"), rng.standard_normal(n))
    attack = np.minimum(1.0, t / 0.015)
    envelope = attack * np.exp(-4.0 * t / seconds)
    return (voiced + 0.6 * breath * np.std(voiced) / (np.std(breath) or 1.0)) * envelope


def laughter(rng: np.random.Generator, rate: int, f0: float, rms: float) -> np.ndarray:
    pulses = []
    for i in range(int(rng.integers(3, 7))):
        pulse = _voiced_pulse(rng, rate, f0 * rng.uniform(0.95, 1.15), rng.uniform(0.09, 0.15))
        pulses.append(pulse * (0.85**i))  # laughs fade out
        pulses.append(np.zeros(int(rng.uniform(0.06, 0.11) * rate)))
    return _at_level(np.concatenate(pulses[:-1]), rms)


def laughing(rng: np.random.Generator, rate: int, speech: np.ndarray) -> np.ndarray:
    """A word said while laughing: a 5 Hz tremolo on the voice and breath between pulses."""
    n = len(speech)
    t = np.arange(n) / rate
    tremolo = 0.55 + 0.45 * np.sin(2 * np.pi * rng.uniform(4.0, 6.0) * t) ** 2
    level = float(np.sqrt(np.mean(speech.astype(np.float64) ** 2))) or 1e-3
    breath = signal.sosfilt(signal.butter(2, [700, 3200], btype="band", fs=rate, output="sos"), rng.standard_normal(n))
    breath *= 0.25 * level / (np.std(breath) or 1.0)
    return (speech * tremolo + breath * (1.0 - tremolo)).astype(np.float32)
