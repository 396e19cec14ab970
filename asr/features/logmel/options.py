"""Kaldi's fbank options and the frame geometry they give (no torch: the stages that only count
frames, the GMM stages' among them, start without it; the filterbank itself is fbank.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from asr.utils.errors import InputError

WINDOW_TYPES = ("povey", "hamming", "hanning", "sine", "rectangular", "blackman")


@dataclass(frozen=True)
class FbankOptions:
    """Kaldi's fbank options (FrameExtraction + MelBanks + Fbank) with Kaldi's defaults,
    except dither, which is 0 here."""

    sample_frequency: float = 16000.0
    frame_length_ms: float = 25.0
    frame_shift_ms: float = 10.0
    dither: float = 0.0
    preemphasis_coefficient: float = 0.97
    remove_dc_offset: bool = True
    window_type: str = "povey"
    round_to_power_of_two: bool = True
    blackman_coeff: float = 0.42
    snip_edges: bool = True
    num_mel_bins: int = 23
    low_freq: float = 20.0
    high_freq: float = 0.0
    use_energy: bool = False
    energy_floor: float = 0.0
    raw_energy: bool = True
    htk_compat: bool = False
    use_log_fbank: bool = True
    use_power: bool = True

    def __post_init__(self) -> None:
        self._check()

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | Any) -> "FbankOptions":
        """The options from a FeaturesConfig (or any mapping with these field names)."""

        def value(name: str, default: Any) -> Any:
            return cfg.get(name, default) if hasattr(cfg, "get") else getattr(cfg, name, default)

        return cls(**{f.name: value(f.name, f.default) for f in fields(cls)})

    # Frame geometry, computed as Kaldi does (truncating to whole samples).
    @property
    def window_length(self) -> int:
        return int(self.sample_frequency * 0.001 * self.frame_length_ms)

    @property
    def window_shift(self) -> int:
        return int(self.sample_frequency * 0.001 * self.frame_shift_ms)

    @property
    def padded_window_length(self) -> int:
        n = self.window_length
        return 1 << (n - 1).bit_length() if self.round_to_power_of_two else n

    @property
    def resolved_high_freq(self) -> float:
        nyquist = 0.5 * self.sample_frequency
        return self.high_freq if self.high_freq > 0 else nyquist + self.high_freq

    @property
    def dim(self) -> int:
        return self.num_mel_bins + int(self.use_energy)

    def to_kaldi_conf(self) -> str:
        """The options as a Kaldi config file (`compute-fbank-feats --config=...`)."""
        renamed = {"frame_length_ms": "frame-length", "frame_shift_ms": "frame-shift"}
        lines = []
        for key, value in asdict(self).items():
            name = renamed.get(key, key.replace("_", "-"))
            if isinstance(value, bool):
                value = "true" if value else "false"
            elif isinstance(value, float):
                value = f"{value:g}"
            lines.append(f"--{name}={value}")
        return "\n".join(lines) + "\n"

    def _check(self) -> None:
        """Kaldi's own checks, as InputError naming the `features.` option to change."""
        nyquist = 0.5 * self.sample_frequency
        problems = []
        if self.window_type not in WINDOW_TYPES:
            problems.append(f"window_type={self.window_type!r} is not one of {WINDOW_TYPES}")
        if self.window_shift < 1 or self.window_length < 2:
            problems.append(
                f"frame_length_ms={self.frame_length_ms}, frame_shift_ms={self.frame_shift_ms} "
                f"give frames of {self.window_length} samples every {self.window_shift}"
            )
        if self.num_mel_bins < 3:
            problems.append(f"num_mel_bins={self.num_mel_bins} must be at least 3")
        if not 0 <= self.low_freq < nyquist:
            problems.append(f"low_freq={self.low_freq} must be in [0, Nyquist={nyquist:g})")
        high = self.resolved_high_freq
        if not (self.low_freq < high <= nyquist):
            problems.append(
                f"high_freq={self.high_freq} gives {high:g} Hz, which must be above low_freq and "
                f"at most Nyquist ({nyquist:g})"
            )
        if problems:
            raise InputError("bad filterbank options: " + "; ".join(problems) + " (set them as features.<option>=...)")


def num_frames(num_samples, opts: FbankOptions):
    """Frames Kaldi makes from `num_samples` samples: an int, or element-wise an integer tensor
    or array."""
    length, shift = opts.window_length, opts.window_shift
    if not opts.snip_edges:
        return (num_samples + shift // 2) // shift
    if isinstance(num_samples, int):
        return 0 if num_samples < length else 1 + (num_samples - length) // shift
    return (num_samples >= length) * (1 + (num_samples - length).clip(min=0) // shift)
