"""The GMM stage: the lang dir, the training and alignment sets, training, boundary accuracy.

A system is done when its stage record (`<gmm.dir>/gmm.record.json`, asr/utils/record.py) names
the same options (the gmm group but where it goes and how it is decoded) and its inputs are
unchanged: the lang dir's record, each set's transcripts, speakers and feature set, and for
kind tri or align the record of the system it starts from.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from asr.features.featureset import feature_set_dir, feature_set_input
from asr.gmm.boundaries import boundary_accuracy
from asr.gmm.graphs import transition_id_phones
from asr.gmm.train import STAGE, TrainingData, read_alignments, run_gmm_alignment, run_gmm_training, training_data
from asr.gmm.transformed import train_lda_mllt, train_sat
from asr.utils.record import record_path, why_rerun

log = logging.getLogger("asr.gmm")

NOT_OPTIONS = ("dir", "decode_acoustic_scale", "submit", "sbatch")  # where the jobs run changes no output
# options only some kinds read: another kind's record leaves them out (and `first` when 0, unset),
# so that a system trained before they existed is not trained again
KIND_OPTIONS = {
    "splice_context": ("lda_mllt",),
    "lda_dim": ("lda_mllt",),
    "mllt_iters": ("lda_mllt",),
    "fmllr_iters": ("sat",),
}
TRAINERS = {
    "lda_mllt": train_lda_mllt,
    "sat": train_sat,
}  # mono and tri: asr/gmm/train.py's own  # where the system goes, how python -m asr.gmm.decode decodes it


def made_from(cfg: Any) -> tuple[dict, list[Path]]:
    """The options and the inputs a GMM system's record names (see the module's docstring)."""
    gmm = cfg.gmm
    options = {
        k: v
        for k, v in OmegaConf.to_container(gmm, resolve=True).items()
        if k not in NOT_OPTIONS and gmm.kind in KIND_OPTIONS.get(k, (gmm.kind,)) and not (k == "first" and not v)
    }
    inputs = [record_path(gmm.lang_dir, "lang")]
    sets = [gmm.align_set] if gmm.kind == "align" else [gmm.train_set, gmm.align_set]
    for name in dict.fromkeys(s for s in sets if s):
        data = Path(cfg.data.data_dir) / name
        inputs += [data / "text", data / "utt2spk", feature_set_input(feature_set_dir(cfg, name))]
    if gmm.kind != "mono":
        inputs.append(record_path(gmm.alignments, STAGE))
    return options, [p for p in inputs if p.is_file()]


def boundary_reporter(cfg: Any, lang, data: TrainingData, data_dir: Path):
    """The summary's `boundaries` entry: the final alignments against the corpus' phone timings."""

    def report(out_dir: Path, tm) -> dict:
        phone_of_tid = transition_id_phones(tm)
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


def run(cfg: Any, lang=None) -> dict:
    """Train (or align with) the system of cfg.gmm unless its record says it is done; returns
    its summary. `lang`: the lang dir already loaded (default: read from gmm.lang_dir)."""
    gmm = cfg.gmm
    made = made_from(cfg)
    reason = why_rerun(gmm.dir, STAGE, *made)
    if reason is None:
        log.info("%s: done already (%s), skipping", gmm.dir, record_path(gmm.dir, STAGE))
        return json.loads((Path(gmm.dir) / "summary.json").read_text())
    log.info("%s: %s", gmm.dir, reason)
    if lang is None:
        from asr.lang.langdir import Lang  # the lang dir's reader (asr/lang)

        lang = Lang.load(gmm.lang_dir)
    data_root = Path(cfg.data.data_dir)
    if gmm.kind == "align":
        align = training_data(data_root / gmm.align_set, feature_set_dir(cfg, gmm.align_set), lang)
        reporter = boundary_reporter(cfg, lang, align, data_root / gmm.align_set) if gmm.phone_timings else None
        return run_gmm_alignment(cfg, lang, align, Path(gmm.dir), made, reporter)
    train = training_data(data_root / gmm.train_set, feature_set_dir(cfg, gmm.train_set), lang, gmm.subset, gmm.first)
    align = None
    if gmm.align_set:
        align = training_data(data_root / gmm.align_set, feature_set_dir(cfg, gmm.align_set), lang)
    reporter = None
    if gmm.phone_timings and align is not None:
        reporter = boundary_reporter(cfg, lang, align, data_root / gmm.align_set)
    return run_gmm_training(cfg, lang, train, align, Path(gmm.dir), made, reporter, TRAINERS.get(gmm.kind))
