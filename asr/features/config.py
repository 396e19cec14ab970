"""Configuration of feature extraction (Hydra group `features`).

The filterbank options carry Kaldi's names (`compute-fbank-feats --help`, dashes become
underscores) and Kaldi's defaults, except `dither` (0, so features are reproducible) and
`sample_frequency` (8 kHz, Switchboard). Each set's output records them in Kaldi's own
`fbank.conf` form, so Kaldi can compute the same features.

`kind` picks the recipe (asr.features.recipes): `fbank` (log-mel, optionally with deltas),
`fmllr` (speaker-adapted LDA+MLLT+fMLLR features from the log-mel filterbank), `fmllr_fbank`
(fMLLR and log-mel with deltas concatenated per frame), `ivector` (i-vectors per frame),
`fmllr_ivector_fbank` (fMLLR, i-vector and log-mel with deltas per frame, the paper's input)
and `kaldi` (features made by Kaldi, used as they are).
"""

from dataclasses import dataclass, field
from typing import ClassVar

from asr.utils.checks import AT_LEAST_ONE, FRACTION, NON_NEGATIVE, POSITIVE, Check, at_least, between, one_of


@dataclass
class FmllrConfig:
    """The GMM front end and per-speaker fMLLR (asr.features.fmllr.recipe)."""

    dim: int = 40  # LDA output = fMLLR dimension
    splice_left: int = 3  # frames of context for LDA (Kaldi's train_lda_mllt.sh: +-3)
    splice_right: int = 3
    lda: bool = True  # false: no LDA+MLLT, the GMM and fMLLR work on the log-mel frames themselves
    num_components: int = 256  # GMM size; its components are also the LDA classes
    mllt_iters: int = 3  # MLLT estimations, each after two EM iterations on the GMM
    em_iters: int = 4  # EM iterations of the final GMM (and after each SAT round)
    sat_iters: int = 1  # speaker-adaptive training rounds: fMLLR on train speakers, then EM
    # Frames the model trains on: speakers with at least min_count frames, spread over the set,
    # each its first frames up to an equal share (Kaldi's subset_data_dir.sh --speakers), so SAT
    # adapts them all.
    max_train_frames: int = 100000
    fmllr_iters: int = 5  # most EM iterations of each fMLLR estimate (posteriors recomputed)
    fmllr_passes: int = 40  # most row-by-row sweeps per EM iteration (Kaldi's --fmllr-num-iters)
    fmllr_tolerance: float = 1e-3  # nats per frame: a sweep or EM iteration gaining less ends its loop
    min_count: float = 500.0  # fewer frames per speaker: identity transform (Kaldi's --fmllr-min-count)
    base_norm_vars: bool = (
        False  # per-speaker CMVN of the log-mel frames before splicing: means only, as Kaldi's GMM systems
    )
    var_floor_ratio: float = 0.01  # Gaussian variances floored at this fraction of the data's
    # A SAT GMM-HMM system of asr.gmm (e.g. exp/tri4): the fMLLR columns are its speaker-adapted
    # features (<system>/fmllr_feats/<set>/, python -m asr.gmm.fmllr_feats) and no UBM is trained;
    # the options above then do not apply. Empty: the UBM front end, estimated without transcripts.
    system: str = ""

    CHECKS: ClassVar[dict[str, Check]] = {
        "dim": AT_LEAST_ONE,
        "splice_left": NON_NEGATIVE,
        "splice_right": NON_NEGATIVE,
        "num_components": AT_LEAST_ONE,
        "mllt_iters": NON_NEGATIVE,
        "em_iters": NON_NEGATIVE,
        "sat_iters": NON_NEGATIVE,
        "max_train_frames": AT_LEAST_ONE,
        "fmllr_iters": NON_NEGATIVE,
        "fmllr_passes": AT_LEAST_ONE,
        "min_count": NON_NEGATIVE,
        "var_floor_ratio": POSITIVE,
    }


@dataclass
class IvectorConfig:
    """The i-vector extractor and extraction (asr.features.ivector.model, asr.features.ivector.recipe).
    Defaults are Kaldi's (online/hybrid recipes: ivector_dim 100, posterior scale 0.1,
    min-post 0.025, 10 EM iterations; sid/train_full_ubm.sh: 4 iterations, gselect 20)."""

    dim: int = 100  # i-vector dimension
    splice_left: int = 3  # front end: raw log-mel spliced +-3...
    splice_right: int = 3
    pca_dim: int = 40  # ...then PCA with normalised mean and variance to this dimension
    num_components: int = 512  # UBM size
    ubm_frames: int = 200000  # frames the UBMs train on: an equal share of every training speaker's
    diag_iters: int = 4  # EM iterations of the diagonal UBM at full size
    full_iters: int = 4  # EM iterations of the full-covariance UBM
    num_gselect: int = 20  # components per frame chosen by the diagonal UBM
    min_post: float = 0.025  # posteriors below this are pruned (the rest renormalised)
    posterior_scale: float = 0.1  # on the posteriors, for the frames' correlation
    em_iters: int = 10  # EM iterations of the extractor, on every training speaker's statistics...
    train_subsample: int = 2  # ...from every n-th frame (posteriors scaled up by n)
    min_count: float = 100.0  # components with a smaller total count keep their parameters
    variance_floor_factor: float = 0.1  # covariances floored at this times the average
    seed: int = 0  # of the extractor's random initial projections
    max_count: float = 100.0  # extraction: statistics past this count weigh as this count (0: off)
    period: int = 10  # frames per i-vector (ivector_period)
    train: str = "speaker"  # training set: speaker (one per speaker) | online (per utterance, every period frames)
    test: str = "online"  # dev and eval sets: online | speaker
    # A directory of Kaldi i-vectors per set (DIR/<set>/ or DIR/ivectors_<set>/ with ivector_online.scp and
    # ivector_period, or ivectors_spk.scp), used as they are instead of extracting; see asr.features.ivector.recipe.
    kaldi_dir: str = ""


@dataclass
class SpecAugmentConfig:
    """SpecAugment-style masking and VTLP-style warping of training features
    (asr.features.specaugment); 0 masks and 0 warp = off."""

    freq_masks: int = 0  # bands of feature dimensions set to zero (the CMVN'd mean)
    freq_width: int = 10  # each band at most this wide
    time_masks: int = 0  # runs of frames set to zero
    time_width: int = 40  # each run at most this long...
    time_ratio: float = 0.2  # ...and at most this fraction of the utterance
    freq_warp: float = 0.0  # feature axis stretched by a factor uniform in 1 +- this (VTLP; 0.1 is usual)

    CHECKS: ClassVar[dict[str, Check]] = {
        "freq_masks": NON_NEGATIVE,
        "freq_width": AT_LEAST_ONE,
        "time_masks": NON_NEGATIVE,
        "time_width": AT_LEAST_ONE,
        "time_ratio": FRACTION,
        "freq_warp": between(0.0, 1.0, high_open=True),
    }


@dataclass
class SplitConfig:
    """A set's log-mel extraction split into `count` shares computed by separate processes (a
    cluster array job each, Kaldi's nj); see asr.features.logmel.extract."""

    count: int = 0  # shares; 0: none, the set is computed by features.jobs local processes
    index: int = -1  # the share this process computes (0 .. count-1); -1: merge the shares into the set

    CHECKS: ClassVar[dict[str, Check]] = {"count": NON_NEGATIVE, "index": at_least(-1)}


@dataclass
class FeaturesConfig:
    name: str = "logmel80"
    feats_dir: str = "feats"  # features go to <feats_dir>/<name>/<set>/
    kind: str = "fbank"  # fbank | fmllr | fmllr_fbank | ivector | fmllr_ivector_fbank | kaldi
    # Deltas of the log-mel stream (Kaldi's add-deltas): 2 = deltas and double deltas.
    delta_order: int = 0
    delta_window: int = 2
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
    # Stored as Kaldi's compressed matrices (copy-feats --compress=true: 1 byte per value, about 4x
    # smaller than float32); deltas are never stored, the reader appends them (asr.features.featureset).
    compress: bool = True
    # Normalisation statistics written beside the features.
    cmvn: str = "utterance"  # utterance | speaker | global | none
    norm_vars: bool = True
    # Extraction driver.
    jobs: int = 2  # worker processes
    device: str = "cpu"  # where the filterbank runs in each worker: cpu | cuda
    # Padded audio per filterbank call. 10 s keeps a batch's float64 frames in cache on a CPU;
    # on a GPU larger batches (minutes) amortise the kernel launches.
    batch_seconds: float = 10.0
    force: bool = False  # recompute sets whose output is already complete
    split: SplitConfig = field(default_factory=SplitConfig)
    fmllr: FmllrConfig = field(default_factory=FmllrConfig)
    ivector: IvectorConfig = field(default_factory=IvectorConfig)
    # kind=kaldi: a directory of Kaldi data dirs <kaldi_dir>/<set>/ with feats.scp (and
    # optionally cmvn.scp, trans.scp); see asr.features.kaldi_import.
    kaldi_dir: str = ""
    specaugment: SpecAugmentConfig = field(default_factory=SpecAugmentConfig)

    CHECKS: ClassVar[dict[str, Check]] = {
        "kind": one_of("fbank", "fmllr", "fmllr_fbank", "ivector", "fmllr_ivector_fbank", "kaldi"),
        "delta_order": NON_NEGATIVE,
        "delta_window": AT_LEAST_ONE,
        "sample_frequency": POSITIVE,
        "frame_length_ms": POSITIVE,
        "frame_shift_ms": POSITIVE,
        "dither": NON_NEGATIVE,
        "preemphasis_coefficient": FRACTION,
        "window_type": one_of("povey", "hamming", "hanning", "sine", "rectangular", "blackman"),
        "num_mel_bins": AT_LEAST_ONE,
        "low_freq": NON_NEGATIVE,
        "cmvn": one_of("utterance", "speaker", "global", "none"),
        "jobs": AT_LEAST_ONE,
        "device": lambda v: None if v == "cpu" or v.startswith("cuda") else "choose cpu or cuda",
        "batch_seconds": POSITIVE,
    }
