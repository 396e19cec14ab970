"""Configuration of GMM-HMM training (Hydra group `gmm`: conf/gmm/mono.yaml, tri.yaml)."""

from dataclasses import dataclass, field
from typing import ClassVar

from asr.utils.checks import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, Check, each, one_of


@dataclass
class GmmConfig:
    kind: str = "mono"  # mono: flat start (train_mono.sh) | tri: a tree on `alignments` (train_deltas.sh)
    # | lda_mllt: spliced statics, LDA on the tied states of `alignments`, MLLT (train_lda_mllt.sh)
    # | sat: per-speaker fMLLR on an lda_mllt system's features (train_sat.sh)
    # | align: the model of `alignments` aligns align_set into dir (align_si.sh; align_fmllr.sh for sat)
    dir: str = "exp/mono"  # the model, tree, ali.N.gz and log go here (Kaldi's exp/mono, exp/tri1)
    lang_dir: str = "${lang.dir}"  # the Kaldi lang dir (python -m asr.lang)
    train_set: str = "${data.train_set}"
    subset: int = 0  # train on the N shortest utterances (Kaldi's train_10kshort); 0: all
    first: int = 0  # train on the first N utterances in key order (subset_data_dir.sh's train_100k); 0: all
    align_set: str = "${data.train_set}"  # aligned with the final model into <dir>/ali.N.gz ('' : none)
    alignments: str = ""  # kind=tri: the alignment dir it starts from (e.g. exp/mono)
    nj: int = 2  # jobs (processes) over shares of the utterances; also the number of ali.N.gz
    # where a pass's jobs run (asr/gmm/jobs.py): local (nj processes here) | slurm (an array of nj
    # tasks a pass, each with the sbatch options `sbatch`, e.g. [--mem=4G]); the results are the same
    submit: str = "local"
    sbatch: list = field(default_factory=list)
    # the features: MFCCs computed from the log-mel set, or the stored features (asr/gmm/frontend.py)
    front_end: str = "mfcc"  # mfcc | stored
    num_ceps: int = 13
    cepstral_lifter: float = 22.0
    delta_order: int = 2  # Kaldi's add-deltas: 13 -> 39 dims
    cmvn: str = "speaker"  # speaker: per speaker, as Kaldi | set: the feature set's own (asr/gmm/frontend.py)
    # kind lda_mllt: the statics spliced +-splice_context, LDA to lda_dim, MLLT at these passes
    splice_context: int = 3
    lda_dim: int = 40
    mllt_iters: list = field(default_factory=lambda: [2, 4, 6, 12])
    # kind sat: every training speaker's fMLLR re-estimated at these passes
    fmllr_iters: list = field(default_factory=lambda: [2, 4, 6, 12])
    # EM
    num_iters: int = 40
    realign_iters: list = field(
        default_factory=lambda: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 18, 20, 23, 26, 29, 32, 35, 38]
    )
    max_iter_inc: int = 30  # last pass that adds Gaussians
    total_gauss: int = 1000  # Gaussians in all at max_iter_inc
    num_leaves: int = 2000  # kind=tri: the tree's leaves (pdfs)
    power: float = 0.25  # Gaussians per pdf grow as occupancy^power
    init_utts: int = 10  # mono: the flat start's global mean and variance from this many utterances
    min_gaussian_occupancy: float = 10.0
    # alignment (gmm-align-compiled)
    beam: float = 10.0
    initial_beam: float = 6.0  # mono: the first realignment's beam
    retry_beam: float = 40.0
    acoustic_scale: float = 0.1
    transition_scale: float = 1.0
    self_loop_scale: float = 0.1
    # decoding (python -m asr.gmm.decode): Kaldi decodes GMM systems at 1/12 (decode.sh --acwt)
    decode_acoustic_scale: float = 0.083333
    # boundary accuracy against the synthetic corpus' phone timings ('' : not measured)
    phone_timings: str = ""  # e.g. ${synth.out_dir}/swb_ms98_transcriptions
    boundary_tolerance_ms: float = 20.0

    CHECKS: ClassVar[dict[str, Check]] = {
        "kind": one_of("mono", "tri", "lda_mllt", "sat", "align"),
        "submit": one_of("local", "slurm"),
        "splice_context": NON_NEGATIVE,
        "lda_dim": AT_LEAST_ONE,
        "mllt_iters": each(AT_LEAST_ONE),
        "fmllr_iters": each(AT_LEAST_ONE),
        "subset": NON_NEGATIVE,
        "first": NON_NEGATIVE,
        "nj": AT_LEAST_ONE,
        "front_end": one_of("mfcc", "stored"),
        "cmvn": one_of("set", "speaker"),
        "num_ceps": AT_LEAST_ONE,
        "cepstral_lifter": NON_NEGATIVE,
        "delta_order": NON_NEGATIVE,
        "num_iters": AT_LEAST_ONE,
        "realign_iters": each(AT_LEAST_ONE),
        "max_iter_inc": NON_NEGATIVE,
        "total_gauss": AT_LEAST_ONE,
        "num_leaves": AT_LEAST_ONE,
        "power": POSITIVE,
        "init_utts": AT_LEAST_ONE,
        "min_gaussian_occupancy": NON_NEGATIVE,
        "beam": POSITIVE,
        "initial_beam": POSITIVE,
        "retry_beam": NON_NEGATIVE,
        "acoustic_scale": POSITIVE,
        "boundary_tolerance_ms": POSITIVE,
        "decode_acoustic_scale": POSITIVE,
    }
