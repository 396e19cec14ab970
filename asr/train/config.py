"""Configuration of training (Hydra group `train`)."""

import logging
from dataclasses import dataclass
from typing import ClassVar

from asr.utils.checks import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, Check, between, one_of

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    epochs: int = 20
    # > 0: stop this run after this many steps (decentralized: batches claimed by all nodes)
    # and save, so that the same command goes on from there (benchmarks, time-limited jobs)
    max_steps: int = 0
    subset_utts: int = 0  # > 0: train on the first N utterances of the training set only (a quick run)
    max_train_utts: int = 0  # the old name of subset_utts, still read (a warning says so)
    max_frames: int = 20000  # batch size per learner in padded input frames (utterances x longest)
    max_utts: int = 64  # and at most this many utterances per batch (the global batch is learners x these)
    optimizer: str = "adam"  # adam | sgd (with momentum)
    lr: float = 1e-3
    # Scale lr with the global batch (learners x max_frames): none | linear | sqrt, relative
    # to lr_reference_frames (0 = max_frames: lr is tuned for one learner's batch).
    lr_scaling: str = "none"
    lr_reference_frames: int = 0
    momentum: float = 0.9
    nesterov: bool = False  # sgd: Nesterov's momentum (the paper's optimizer: sgd, momentum 0.9, nesterov)
    weight_decay: float = 0.0
    warmup_steps: int = 200  # linear warm-up over this many updates
    lr_decay: float = 0.85  # lr multiplied by this after every epoch
    # > 0: instead of lr_decay, the lr falls exponentially with every update to this value at
    # the last update (Kaldi nnet3's initial/final effective lrate)
    final_lr: float = 0.0
    grad_clip: float = 5.0  # global gradient-norm clipping; 0 = off
    checkpoint_every_steps: int = 200  # plus one at every epoch end
    keep_checkpoints: int = 3  # periodic checkpoints kept (best.pt and last.pt are extra)
    keep_epoch_checkpoints: int = (
        5  # copies of the newest epoch ends kept (epoch-<E>.pt, for python -m asr.average); 0 = none
    )
    log_every_steps: int = 50  # a train_log.csv row (and TensorBoard scalars) every this many steps
    tensorboard: bool = True  # <exp_dir>/tensorboard/learner-<rank>/: loss, lr, frames/s, waiting for data and others
    # <exp_dir>/loss.png at every epoch end (it imports matplotlib); train_log.csv is written either way
    plot: bool = True
    # <exp_dir>/trained/learner-<rank>.txt: the utterances of every step (asr/train/record.py)
    record_utterances: bool = False
    num_workers: int = 0  # DataLoader worker processes
    prefetch_batches: int = 2  # batches read ahead on a thread while a step runs (ADPSGD, H-ADPSGD: 1, each is claimed)
    # > 0: shuffle within windows of this many utterances (in archive order), windows in random
    # order: reads stay within one stretch of the archives when the features exceed memory
    shuffle_window_utts: int = 0
    threads: int = 2  # torch.set_num_threads
    # fp32 | bf16 (autocast: bfloat16 matrix products, fp32 weights) | fp16 (the same in float16,
    # with a loss scaler) | auto: bf16 where the hardware computes it (Ampere and later GPUs,
    # CPUs with AVX512-BF16/AMX), else fp16 on GPUs and fp32 on CPUs.
    precision: str = "fp32"
    force: bool = False  # resume even if the model/data config changed
    # start afresh: the experiment's training outputs move to <exp_dir>/previous/<N>/ first
    restart: bool = False
    # What is trained (asr/train/objectives.py): ctc, or frame_ce on Kaldi alignments
    # (asr/kaldi/alignments.py) with model.head=frame_ce (experiment=hybrid_ce sets both).
    objective: str = "ctc"  # ctc | frame_ce
    alignments: str = ""  # frame_ce: Kaldi alignments: a dir (its ali.N.gz), a glob, an .ark/.gz or .scp
    dev_alignments: str = ""  # frame_ce: of the dev set; empty = train.alignments
    transition_model: str = "auto"  # transition id -> pdf id: auto | none | final.mdl (binary/text) | `tid pdf` table
    ali_length_tolerance: int = 2  # alignment and features may differ by this many frames
    # frame_ce: > 0 cuts every training utterance into samples of this many frames, shuffled
    # over the set, as the paper trains (21; asr/train/chunks.py); 0 = whole utterances
    chunk_frames: int = 0
    batch_samples: int = 128  # chunk_frames > 0: samples per learner and batch (not max_frames/max_utts)

    CHECKS: ClassVar[dict[str, Check]] = {
        "epochs": AT_LEAST_ONE,
        "max_frames": AT_LEAST_ONE,
        "max_utts": AT_LEAST_ONE,
        "optimizer": one_of("adam", "sgd"),
        "lr": POSITIVE,
        "lr_scaling": one_of("none", "linear", "sqrt"),
        "lr_reference_frames": NON_NEGATIVE,
        "momentum": between(0.0, 1.0, high_open=True),
        "weight_decay": NON_NEGATIVE,
        "warmup_steps": NON_NEGATIVE,
        "lr_decay": POSITIVE,
        "final_lr": NON_NEGATIVE,
        "grad_clip": NON_NEGATIVE,
        "checkpoint_every_steps": AT_LEAST_ONE,
        "keep_checkpoints": AT_LEAST_ONE,
        "keep_epoch_checkpoints": NON_NEGATIVE,
        "log_every_steps": AT_LEAST_ONE,
        "num_workers": NON_NEGATIVE,
        "prefetch_batches": AT_LEAST_ONE,
        "shuffle_window_utts": NON_NEGATIVE,
        "threads": AT_LEAST_ONE,
        "precision": one_of("fp32", "bf16", "fp16", "auto"),
        "max_steps": NON_NEGATIVE,
        "max_train_utts": NON_NEGATIVE,
        "subset_utts": NON_NEGATIVE,
        "objective": one_of("ctc", "frame_ce"),
        "ali_length_tolerance": NON_NEGATIVE,
        "chunk_frames": NON_NEGATIVE,
        "batch_samples": AT_LEAST_ONE,
    }


RENAMED = {"max_train_utts": "subset_utts"}  # old key -> new key of the train group


def subset_utts(tcfg) -> int:
    """train.subset_utts, or its old name train.max_train_utts (with a warning)."""
    if tcfg.max_train_utts and not tcfg.subset_utts:
        log.warning("train.max_train_utts is now train.subset_utts; the old name still works")
        return int(tcfg.max_train_utts)
    return int(tcfg.subset_utts)
