"""Configuration of decoding (Hydra group `decode`)."""

from dataclasses import dataclass, field
from typing import ClassVar

from asr.utils.checks import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, Check, at_least, one_of


@dataclass
class DecodeSplitConfig:
    """Decoding (and tuning) split into `count` shares of each set's utterances, one process
    each (a cluster array task, Kaldi's nj), then merged; see asr/decode/shares.py."""

    count: int = 0  # shares; 0: not split
    index: int = -1  # the share this process decodes (0 .. count-1); -1: merge the shares

    CHECKS: ClassVar[dict[str, Check]] = {"count": NON_NEGATIVE, "index": at_least(-1)}


@dataclass
class DecodeConfig:
    name: str = "greedy"
    kind: str = "greedy"  # greedy | beam_lm (word LM) | loglikes (Kaldi log-likelihoods of a frame_ce model) | wfst
    sets: list = field(default_factory=list)  # data sets to decode; empty -> [data.eval_set]
    checkpoint: str = "last"  # last | best | a name in <exp_dir>/checkpoints (avg-last5: python -m asr.average) | path
    dir_suffix: str = ""  # output in <exp_dir>/decode_<set><dir_suffix>/ (e.g. _greedy beside the LM decode)
    batch_size: int = 32
    threads: int = 2  # torch threads of the acoustic model
    frame_shift_ms: float = 10.0
    # kind=loglikes (asr/decode/loglikes.py): log posterior - prior_scale x log prior, Kaldi ark/scp
    pdf_counts: str = ""  # the priors' counts (Kaldi vector); empty = <exp_dir>/pdf_counts from training
    prior_scale: float = 1.0
    upsample: bool = True  # one row per 10 ms frame (repeat each output frame model.subsample times)
    # kind=wfst (asr/decode/wfst.py): the frame_ce model's log-likelihoods searched in an HCLG
    graph: str = ""  # the graph dir (HCLG.fst) of the alignment model, as the recipe's mkgraph writes it
    hmm_model: str = ""  # that model's final.mdl (its transition model maps transition ids to pdfs)
    acoustic_scale: float = 0.1  # times the log-likelihoods (Kaldi's --acoustic-scale)
    wfst_beam: float = 13.0
    max_active: int = 7000
    lattice_beam: float = 6.0
    # kind=beam_lm (asr/decode/beam.py, search.py): CTC prefix beam search with the word LM
    lm: str = "auto"  # auto: <lm.dir>/<lm.decode_order>gram.bin | none: lexicon only | a KenLM file
    lexicon_words: str = "auto"  # auto: the LM vocabulary <lm.dir>/words.txt | a words file
    beam_size: int = 16
    beam_size_token: int = 10
    beam_threshold: float = 20.0
    lm_weight: float = 0.5  # times ln P_LM
    word_score: float = 0.0  # per word (insertion bonus)
    jobs: int = 2  # beam search worker processes
    # The dev-set sweep (python -m asr.tune) and using its best values
    use_tuned: bool = True
    tuning_file: str = "${exp_dir}/lm_tuning.json"
    tune_set: str = "${data.dev_set}"
    tune_lm_weights: list = field(default_factory=lambda: [0.3, 0.5, 0.8, 1.2])
    tune_word_scores: list = field(default_factory=lambda: [-1.0, 0.0, 1.0, 2.0])
    tune_acoustic_scales: list = field(
        default_factory=lambda: [0.067, 0.083, 0.1, 0.125, 0.15, 0.2, 0.25, 0.333]
    )  # kind=wfst
    split: DecodeSplitConfig = field(default_factory=DecodeSplitConfig)

    CHECKS: ClassVar[dict[str, Check]] = {
        "kind": one_of("greedy", "beam_lm", "loglikes", "wfst"),
        "acoustic_scale": POSITIVE,
        "wfst_beam": POSITIVE,
        "max_active": AT_LEAST_ONE,
        "lattice_beam": POSITIVE,
        "batch_size": AT_LEAST_ONE,
        "threads": AT_LEAST_ONE,
        "frame_shift_ms": POSITIVE,
        "prior_scale": NON_NEGATIVE,
        "beam_size": AT_LEAST_ONE,
        "beam_size_token": AT_LEAST_ONE,
        "beam_threshold": POSITIVE,
        "jobs": AT_LEAST_ONE,
    }
