"""The GMM stage: the lang dir, the training and alignment sets, training, boundary accuracy."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from asr.features.featureset import feature_set_dir
from asr.gmm.boundaries import boundary_accuracy
from asr.gmm.train import TrainingData, read_alignments, run_gmm_alignment, run_gmm_training, training_data

log = logging.getLogger("asr.gmm")


def boundary_reporter(cfg: Any, lang, data: TrainingData, data_dir: Path):
    """The summary's `boundaries` entry: the final alignments against the corpus' phone timings."""

    def report(out_dir: Path, tm) -> dict:
        phone_of_tid = np.array([0] + [tm.transition_id_to_phone(t) for t in range(1, tm.num_transition_ids + 1)])
        tolerance = int(round(cfg.gmm.boundary_tolerance_ms / 10.0))
        score = boundary_accuracy(
            Path(cfg.gmm.phone_timings),
            data_dir,
            data.utts,
            read_alignments(out_dir).items(),
            phone_of_tid,
            lang.phones,
            tolerance,
        )
        log.info(
            "phone boundaries within %.0f ms of the synthesiser's: %.1f%% with the same phone pair, %.1f%% of "
            "the corresponding ones (phone sequences aligned), of %d (%d utterances unaligned)",
            cfg.gmm.boundary_tolerance_ms,
            100 * score.accuracy,
            100 * score.matched_accuracy,
            score.reference,
            score.missing_utterances,
        )
        return score.as_dict()

    return report


def run(cfg: Any) -> dict:
    from asr.lang.langdir import Lang  # the lang dir's reader (asr/lang)

    gmm = cfg.gmm
    lang = Lang.load(gmm.lang_dir)
    data_root = Path(cfg.data.data_dir)
    if gmm.kind == "align":
        align = training_data(data_root / gmm.align_set, feature_set_dir(cfg, gmm.align_set), lang)
        reporter = boundary_reporter(cfg, lang, align, data_root / gmm.align_set) if gmm.phone_timings else None
        return run_gmm_alignment(cfg, lang, align, Path(gmm.dir), reporter)
    train = training_data(data_root / gmm.train_set, feature_set_dir(cfg, gmm.train_set), lang, gmm.subset)
    align = None
    if gmm.align_set:
        align = training_data(data_root / gmm.align_set, feature_set_dir(cfg, gmm.align_set), lang)
    reporter = None
    if gmm.phone_timings and align is not None:
        reporter = boundary_reporter(cfg, lang, align, data_root / gmm.align_set)
    return run_gmm_training(cfg, lang, train, align, Path(gmm.dir), reporter)
