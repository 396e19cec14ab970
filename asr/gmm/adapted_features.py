"""A SAT system's speaker-adapted features as Kaldi data dirs, as Kaldi's
steps/nnet/make_fmllr_feats.sh writes them for a hybrid model (`data-fmllr-tri4/<set>/`):

    <gmm.dir>/fmllr_feats/<set>/  feats.ark, feats.scp, utt2spk, utt2num_frames, trans.ark

for the training, dev and eval sets: the system's statics (asr/gmm/frontend.py), spliced and
projected by its final.mat, each speaker's transform applied. A set's transforms are those the
system estimated for its speakers: the training set's in training (`<gmm.dir>/trans.ark`), the
dev set's in its alignment (`<gmm.dir>_ali_dev/trans.ark`, align_fmllr.sh), the eval set's in
its two-pass decoding (`<gmm.dir>/decode_<set>/trans.ark`); the first of those dirs holding
every speaker of the set is used, so the stage runs after the system's dev alignment and
decoding. `features=sat40` (kind kaldi) imports the dirs as the model's feature set;
`features=sat40_ivector100_logmel40_deltas` (features.fmllr.system) pastes them into the paper's
260-dim input.

A set is written again unless its record (`fmllr_feats.record.json`) names the same front end
and unchanged inputs: the system's matrix, the transforms used, the set's feature set.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import kaldiio
import numpy as np

from asr.data.datadir import read_data_dir
from asr.features.featureset import feature_set_dir, feature_set_input
from asr.features.fmllr.system import FMLLR_FEATS_STAGE, system_set_dir
from asr.gmm.frontend import GmmFeatures, Projection
from asr.kaldi.matrix import read_transform_ark
from asr.kaldi.table import c_sort_key, write_table
from asr.utils.atomic import atomic_dir
from asr.utils.errors import InputError
from asr.utils.record import outputs_of, why_rerun, write_record

log = logging.getLogger("asr.gmm")

STAGE, RERUN = FMLLR_FEATS_STAGE, "python -m asr.gmm.fmllr_feats"
FRONT_END = ("front_end", "num_ceps", "cepstral_lifter", "cmvn")


def transform_candidates(system: Path, set_name: str, train_set: str, dev_set: str) -> list[Path]:
    """Where the system may have estimated a set's speakers' transforms, in order of preference."""
    candidates = [system / f"decode_{set_name}" / "trans.ark"]
    if set_name == train_set:
        candidates.insert(0, system / "trans.ark")
    if set_name == dev_set:
        candidates.append(system.parent / f"{system.name}_ali_dev" / "trans.ark")
    return candidates


def set_transforms(system: Path, set_name: str, speakers: set[str], cfg: Any) -> tuple[Path, dict]:
    """(the archive, speaker -> transform) of the first candidate that covers every speaker."""
    tried = []
    for path in transform_candidates(system, set_name, cfg.data.train_set, cfg.data.dev_set):
        if path.is_file():
            transforms = read_transform_ark(path)
            if speakers <= set(transforms):
                return path, transforms
            tried.append(f"{path} ({len(speakers - set(transforms))} speakers missing)")
        else:
            tried.append(f"{path} (absent)")
    raise InputError(
        f"{set_name}: no transforms of {system} for all its speakers (tried {', '.join(tried)}); "
        "align the dev set (gmm.kind=align) and decode the eval set with the SAT system first"
    )


def write_adapted_features(cfg: Any) -> list[Path]:
    """Every set of cfg.data into <gmm.dir>/fmllr_feats/<set>/; returns the dirs."""
    system = Path(cfg.gmm.dir)
    if not (system / "final.alimdl").is_file() or not (system / "final.mat").is_file():
        raise InputError(f"gmm.dir={system}: not a SAT system (no final.alimdl, final.mat); train gmm=sat first")
    sets = dict.fromkeys((cfg.data.train_set, cfg.data.dev_set, cfg.data.eval_set))
    return [write_set(cfg, system, name) for name in sets]


def write_set(cfg: Any, system: Path, set_name: str) -> Path:
    out_dir = system_set_dir(system, set_name)
    data = read_data_dir(Path(cfg.data.data_dir) / set_name, tables=("utt2spk",))
    feats_dir = feature_set_dir(cfg, set_name)
    g = cfg.gmm
    statics = GmmFeatures(feats_dir, data.utt2spk, g.front_end, g.num_ceps, g.cepstral_lifter, g.cmvn)
    utts = sorted(statics.reader.utts(), key=c_sort_key)
    speakers = {data.utt2spk.get(u, u) for u in utts}
    source, transforms = set_transforms(system, set_name, speakers, cfg)
    options = {k: g[k] for k in FRONT_END}
    inputs = [system / "final.mat", system / "splice_opts", source, feature_set_input(feats_dir)]
    reason = why_rerun(out_dir, STAGE, options, [p for p in inputs if p.is_file()])
    if reason is None:
        log.info("%s: written already from these transforms (%s), skipping", set_name, out_dir)
        return out_dir
    log.info("%s: speaker-adapted features of %s with %s (%s)", set_name, system, source, reason)
    projection = Projection.load(system, g.delta_order)
    projection.speaker_transforms, projection.utt2spk = transforms, dict(data.utt2spk)
    frames = {}
    with atomic_dir(out_dir) as tmp:
        ark = out_dir.absolute() / "feats.ark"  # the scp names the ark where it will be
        with kaldiio.WriteHelper(f"ark,scp:{tmp / 'feats.ark'},{tmp / 'feats.scp'}") as writer:
            for utt in utts:
                feats = projection(utt, statics.statics(utt))
                writer(utt, np.ascontiguousarray(feats, dtype=np.float32))
                frames[utt] = len(feats)
        scp = (tmp / "feats.scp").read_text().replace(str(tmp / "feats.ark"), str(ark))
        (tmp / "feats.scp").write_text(scp)
        write_table(tmp / "utt2spk", {u: data.utt2spk.get(u, u) for u in utts})
        write_table(tmp / "utt2num_frames", {u: str(n) for u, n in frames.items()})
        kaldiio.save_ark(str(tmp / "trans.ark"), {s: transforms[s].astype(np.float32) for s in sorted(speakers)})
        write_record(
            tmp, STAGE, RERUN, options, [p for p in inputs if p.is_file()], outputs_of(tmp, sizes_only=(".ark",))
        )
    log.info("%s: %d utterances, %d frames of dim %d -> %s", set_name, len(utts), sum(frames.values()),
             projection.dim(g.num_ceps), out_dir)  # fmt: skip
    return out_dir
