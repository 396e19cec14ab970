"""Configuration of feature extraction (Hydra group `features`)."""

from dataclasses import dataclass


@dataclass
class FeaturesConfig:
    name: str = "logmel80"
    feats_dir: str = "feats"  # features go to <feats_dir>/<name>/<set>/
    kind: str = "fbank"
    sample_frequency: float = 8000.0
    num_mel_bins: int = 80
    frame_length_ms: float = 25.0
    frame_shift_ms: float = 10.0
    dither: float = 0.0
    low_freq: float = 20.0
    high_freq: float = 0.0  # <= 0: offset from Nyquist, as in Kaldi
    use_energy: bool = False
    cmvn: str = "utterance"  # utterance | speaker | global | none
    norm_vars: bool = True
    jobs: int = 2
