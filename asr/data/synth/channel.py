"""The telephone channel: 8 kHz sampling, 300-3400 Hz band, line noise, safe mu-law levels."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy import signal

RATE = 8000  # Switchboard and CallHome are 8 kHz telephone speech
BAND_HZ = (300.0, 3400.0)
PEAK = 0.97  # keep below mu-law's full scale so peaks are not clipped


def db_to_amplitude(db: float) -> float:
    return float(10.0 ** (db / 20.0))


def to_phone_rate(samples: np.ndarray, rate: int) -> np.ndarray:
    """Resample (eSpeak's 22050 Hz) to 8 kHz with a zero-phase polyphase filter, so sample
    positions map linearly and word times stay exact."""
    if rate == RATE:
        return samples.astype(np.float32)
    g = np.gcd(RATE, rate)
    up, down = RATE // g, rate // g
    return signal.resample_poly(samples.astype(np.float64), up, down, window=_resample_filter(up, down)).astype(
        np.float32
    )


@lru_cache(maxsize=4)
def _resample_filter(up: int, down: int) -> np.ndarray:
    """The low-pass filter resample_poly designs by default (Kaiser, beta 5, 10 taps per phase
    each side), designed once: redesigning it per utterance was an eighth of the synthesis."""
    max_rate = max(up, down)
    return signal.firwin(2 * 10 * max_rate + 1, 1.0 / max_rate, window=("kaiser", 5.0))


def phone_position(position: int, rate: int) -> int:
    """Where sample `position` at `rate` lands after to_phone_rate()."""
    return int(round(position * RATE / rate))


@lru_cache(maxsize=1)
def _band_filter() -> np.ndarray:
    return signal.butter(4, BAND_HZ, btype="band", fs=RATE, output="sos")


def telephone_line(speech: np.ndarray, rng: np.random.Generator, noise_db: float) -> np.ndarray:
    """Add the line's noise floor (white, `noise_db` dBFS RMS before band-limiting) and
    band-limit everything to the telephone band without shifting it in time."""
    noisy = speech.astype(np.float64) + db_to_amplitude(noise_db) * rng.standard_normal(len(speech))
    limited = signal.sosfiltfilt(_band_filter(), noisy)
    return np.clip(limited, -PEAK, PEAK).astype(np.float32)
