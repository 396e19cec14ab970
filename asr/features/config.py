"""Configuration of feature extraction (Hydra group `features`).

The filterbank options carry Kaldi's names (`compute-fbank-feats --help`, dashes become
underscores) and Kaldi's defaults, except `dither` (0, so features are reproducible) and
`sample_frequency` (8 kHz, Switchboard). Each set's output records them in Kaldi's own
`fbank.conf` form, so Kaldi can compute the same features.
"""

from dataclasses import dataclass


@dataclass
class FeaturesConfig:
    name: str = "logmel80"
    feats_dir: str = "feats"  # features go to <feats_dir>/<name>/<set>/
    kind: str = "fbank"
    # Framing (Kaldi's FrameExtractionOptions).
    sample_frequency: float = 8000.0
    frame_length_ms: float = 25.0
    frame_shift_ms: float = 10.0
    dither: float = 0.0
    preemphasis_coefficient: float = 0.97
    remove_dc_offset: bool = True
    window_type: str = "povey"  # povey | hamming | hanning | sine | rectangular | blackman
    round_to_power_of_two: bool = True
    blackman_coeff: float = 0.42
    snip_edges: bool = True  # false: frames centred on multiples of the shift, edges reflected
    # Mel filterbank (Kaldi's MelBanksOptions; VTLN is not supported).
    num_mel_bins: int = 80
    low_freq: float = 20.0
    high_freq: float = 0.0  # <= 0: offset from Nyquist, as in Kaldi
    # Kaldi's FbankOptions.
    use_energy: bool = False  # prepend log energy (append with htk_compat)
    energy_floor: float = 0.0
    raw_energy: bool = True  # energy before pre-emphasis and windowing
    htk_compat: bool = False
    use_log_fbank: bool = True
    use_power: bool = True
    # Normalisation statistics written beside the features.
    cmvn: str = "utterance"  # utterance | speaker | global | none
    norm_vars: bool = True
    # Extraction driver.
    jobs: int = 2  # worker processes
    device: str = "cpu"  # where the filterbank runs in each worker: cpu | cuda
    batch_seconds: float = 300.0  # padded audio per filterbank call (bounds memory)
    force: bool = False  # recompute sets whose output is already complete
