"""Feature recipes: `features.kind` picks how a set's features are made.

  fbank        log-mel filterbank (asr.features.logmel.extract), optionally with deltas
               (conf/features/logmel80.yaml, logmel40_deltas.yaml)
  fmllr        speaker-adapted LDA+MLLT+fMLLR features (asr.features.fmllr.recipe; fmllr40.yaml)
  fmllr_fbank  fMLLR and log-mel with deltas, concatenated per frame (fmllr40_logmel40_deltas.yaml)
  ivector      i-vectors, per speaker or online per utterance, repeated for every frame
               (asr.features.ivector.recipe; ivector100.yaml)
  fmllr_ivector_fbank  fMLLR, i-vector and log-mel with deltas per frame, the paper's input
               (fmllr40_ivector100_logmel40_deltas.yaml)
  kaldi        features made by Kaldi, used as they are (asr.features.kaldi_import)

Every recipe writes `<feats_dir>/<name>/<set>/` with feats.scp, feat_dim (the model's input
size), utt2num_frames and CMVN statistics.
"""

from __future__ import annotations

from typing import Any

from asr.features.logmel.extract import extract_features
from asr.features.summary import SetSummary
from asr.features.logmel.options import FbankOptions
from asr.features.fmllr.recipe import feature_dim as fmllr_feature_dim
from asr.features.fmllr.recipe import make_fmllr_features
from asr.features.ivector.recipe import make_ivector_features
from asr.features.kaldi_import import import_kaldi_features
from asr.features.pool import shared_workers
from asr.utils.errors import InputError

KINDS = ("fbank", "fmllr", "fmllr_fbank", "ivector", "fmllr_ivector_fbank", "kaldi")


def make_features(cfg: Any) -> list[SetSummary]:
    """The features stage for every set of cfg.data, its split steps on one pool of
    features.jobs workers (asr/features/pool.py)."""
    with shared_workers(int(cfg.features.jobs)):
        return make_features_of_kind(cfg)


def make_features_of_kind(cfg: Any) -> list[SetSummary]:
    kind = cfg.features.kind
    if kind == "fbank":
        return extract_features(cfg)
    if kind in ("fmllr", "fmllr_fbank", "fmllr_ivector_fbank"):
        return make_fmllr_features(cfg)
    if kind == "ivector":
        return make_ivector_features(cfg)
    if kind == "kaldi":
        return import_kaldi_features(cfg)
    raise InputError(f"features.kind={kind!r}: choose one of {KINDS}")


def feature_dim(feats_cfg: Any) -> int | None:
    """The per-frame dimension a recipe produces (None for kind=kaldi: whatever Kaldi made)."""
    kind = feats_cfg.kind
    if kind == "fbank":
        return FbankOptions.from_config(feats_cfg).dim * (1 + feats_cfg.delta_order)
    if kind in ("fmllr", "fmllr_fbank", "fmllr_ivector_fbank"):
        return fmllr_feature_dim(feats_cfg)
    if kind == "ivector":
        return feats_cfg.ivector.dim
    if kind == "kaldi":
        return None
    raise InputError(f"features.kind={kind!r}: choose one of {KINDS}")
