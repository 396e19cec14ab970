"""Features made by Kaldi, used as they are (features.kind=kaldi, features.kaldi_dir=DIR).

DIR holds one Kaldi data dir per set, `DIR/<set>/feats.scp` (and optionally `cmvn.scp`,
`utt2spk`, `utt2num_frames`, `trans.scp`), plus, when the transforms apply to LDA+MLLT
features, Kaldi's experiment files `DIR/final.mat`, `DIR/splice_opts`, `DIR/cmvn_opts`.

  without trans.scp  feats.scp and cmvn.scp are referenced verbatim (Kaldi's arks are read in
                     place, pipes included); cmvn_type says whether the statistics are per
                     utterance or per speaker; no cmvn.scp: ours are computed (features.cmvn).
  with trans.scp     the features are materialised as Kaldi's decoding would compute them:
                     apply-cmvn (cmvn_opts, per speaker) | splice-feats | transform-feats
                     final.mat | transform-feats --utt2spk trans.scp, and CMVN statistics are
                     computed on the result per features.cmvn.

The output directory has the same files as every other recipe's (feats.scp, feat_dim,
utt2num_frames, cmvn_type), so training and decoding read it the same way.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import kaldiio
import numpy as np
from tqdm import tqdm

from asr.data.datadir import read_data_dir
from asr.features import cmvn
from asr.features.featureset import non_finite_problem
from asr.features.parts import repoint_scp
from asr.features.summary import SetSummary
from asr.kaldi.matrix import apply_transform, read_matrix, read_transforms
from asr.features.splice import splice
from asr.kaldi import commands
from asr.kaldi.table import c_sort_key, read_table, write_table
from asr.utils.atomic import atomic_dir
from asr.utils.errors import InputError

log = logging.getLogger("asr.features")


def import_kaldi_features(cfg: Any) -> list[SetSummary]:
    fcfg = cfg.features
    if not fcfg.kaldi_dir:
        raise InputError("features.kind=kaldi needs features.kaldi_dir=DIR (Kaldi data dirs DIR/<set>/feats.scp)")
    kaldi_dir = Path(fcfg.kaldi_dir)
    out_root = Path(fcfg.feats_dir) / fcfg.name
    summaries = []
    for set_name in (cfg.data.train_set, cfg.data.dev_set, cfg.data.eval_set):
        utt2spk = _utt2spk(kaldi_dir / set_name, Path(cfg.data.data_dir) / set_name)
        summaries.append(import_set(kaldi_dir, kaldi_dir / set_name, out_root / set_name, utt2spk, fcfg.cmvn))
    return summaries


def _utt2spk(kaldi_set: Path, data_dir: Path) -> dict[str, str]:
    if (kaldi_set / "utt2spk").is_file():
        return read_table(kaldi_set / "utt2spk")
    return read_data_dir(data_dir, tables=()).utt2spk


def import_set(kaldi_dir: Path, kaldi_set: Path, out_dir: Path, utt2spk: dict[str, str], cmvn_unit: str) -> SetSummary:
    scp = kaldi_set / "feats.scp"
    if not scp.is_file():
        raise InputError(f"{scp}: missing; features.kaldi_dir must hold a Kaldi data dir per set with feats.scp")
    feats = commands.load_scp(scp)
    with atomic_dir(out_dir) as tmp:
        if (kaldi_set / "trans.scp").is_file():
            num_frames, dim = _materialise(kaldi_dir, kaldi_set, feats, utt2spk, tmp, out_dir, cmvn_unit)
        else:
            num_frames, dim = _reference(kaldi_set, feats, utt2spk, tmp, out_dir, cmvn_unit)
        write_table(tmp / "utt2num_frames", {u: str(n) for u, n in num_frames.items()})
        (tmp / "feat_dim").write_text(f"{dim}\n")
    log.info("%s: %d utterances of dim %d from %s", out_dir.name, len(num_frames), dim, kaldi_set)
    return SetSummary(out_dir.name, len(num_frames), sum(num_frames.values()), 0.0, 0.0, 0)


def _read(feats, utt: str, scp: Path) -> np.ndarray:
    try:
        return np.asarray(feats[utt])
    except Exception as err:
        raise InputError(f"{scp}: cannot read {utt!r} ({err})") from None


def _reference(
    kaldi_set: Path, feats, utt2spk: dict[str, str], tmp: Path, out_dir: Path, cmvn_unit: str
) -> tuple[dict[str, int], int]:
    """Kaldi's feats.scp/cmvn.scp as they are; frame counts from utt2num_frames if present."""
    scp = kaldi_set / "feats.scp"
    shutil.copyfile(scp, tmp / "feats.scp")
    if (kaldi_set / "utt2num_frames").is_file():
        num_frames = {u: int(n) for u, n in read_table(kaldi_set / "utt2num_frames").items()}
        dim = _read(feats, next(iter(feats)), scp).shape[1]
    else:
        mats = {u: _read(feats, u, scp) for u in tqdm(feats, desc="frame counts", mininterval=2.0, disable=None)}
        num_frames, dim = {u: m.shape[0] for u, m in mats.items()}, next(iter(mats.values())).shape[1]
    if (kaldi_set / "cmvn.scp").is_file():
        shutil.copyfile(kaldi_set / "cmvn.scp", tmp / "cmvn.scp")
        (tmp / "cmvn_type").write_text(_cmvn_unit_of(kaldi_set / "cmvn.scp", utt2spk) + "\n")
    else:
        stats = (
            cmvn.compute_stats(cmvn_unit, lambda: ((u, _read(feats, u, scp)) for u in feats), utt2spk)
            if cmvn_unit != "none"
            else {}
        )
        _write_stats(stats, tmp, out_dir, cmvn_unit)
    return num_frames, dim


def _cmvn_unit_of(cmvn_scp: Path, utt2spk: dict[str, str]) -> str:
    keys = set(read_table(cmvn_scp))
    if keys and keys <= set(utt2spk.values()):
        return "speaker"
    if keys and keys <= set(utt2spk):
        return "utterance"
    if keys == {"global"}:
        return "global"
    raise InputError(f"{cmvn_scp}: its keys are neither the speakers nor the utterances of utt2spk")


class _KaldiPipeline:
    """apply-cmvn | splice-feats | transform-feats final.mat | transform-feats trans.scp, for
    one utterance at a time (the steps whose files are absent are left out)."""

    def __init__(self, kaldi_dir: Path, kaldi_set: Path, feats, utt2spk: dict[str, str]):
        self.scp, self.feats, self.utt2spk = kaldi_set / "feats.scp", feats, utt2spk
        self.transforms = read_transforms(kaldi_set / "trans.scp")
        self.cmvn = _kaldi_cmvn(kaldi_dir, kaldi_set, utt2spk)
        self.matrix = read_matrix(kaldi_dir / "final.mat") if (kaldi_dir / "final.mat").is_file() else None
        self.context = _splice_context(kaldi_dir) if self.matrix is not None else (0, 0)

    def __call__(self, utt: str) -> np.ndarray:
        speaker = self.utt2spk[utt]
        transform = self.transforms.get(speaker, self.transforms.get(utt))  # per speaker, or per utterance
        if transform is None:
            raise InputError(
                f"{self.scp.parent / 'trans.scp'}: no transform for speaker {speaker!r} (nor utterance {utt!r})"
            )
        mat = _read(self.feats, utt, self.scp).astype(np.float64)
        if self.cmvn is not None:
            mat = self.cmvn(utt, mat).astype(np.float64)
        if self.matrix is not None:
            mat = apply_transform(splice(mat, *self.context).astype(np.float64), self.matrix).astype(np.float64)
        return apply_transform(mat, transform)


def _materialise(
    kaldi_dir: Path, kaldi_set: Path, feats, utt2spk: dict[str, str], tmp: Path, out_dir: Path, cmvn_unit: str
) -> tuple[dict[str, int], int]:
    """Kaldi's adapted features written as an ark, with CMVN statistics per `cmvn_unit`."""
    pipeline = _KaldiPipeline(kaldi_dir, kaldi_set, feats, utt2spk)
    num_frames, stats, dim, skipped = {}, {}, 0, {}
    utts = sorted((u for u in utt2spk if u in feats), key=c_sort_key)
    with kaldiio.WriteHelper(f"ark,scp:{tmp / 'feats.ark'},{tmp / 'feats.scp'}") as writer:
        for utt in tqdm(utts, desc=kaldi_set.name, unit="utt", mininterval=2.0, disable=None):
            out = pipeline(utt)
            problem = non_finite_problem(out)
            if problem:
                skipped[utt] = problem
                continue
            writer(utt, out)
            num_frames[utt], dim = out.shape[0], out.shape[1]
            if cmvn_unit != "none":
                cmvn.add_stats(stats, cmvn.compute_stats(cmvn_unit, {utt: out}, utt2spk))
    repoint_scp(tmp / "feats.scp", out_dir.absolute() / "feats.ark")
    _write_stats(stats, tmp, out_dir, cmvn_unit)
    if skipped:
        write_table(tmp / "skipped", skipped)
        log.warning(
            "%s: %d utterances skipped for non-finite values, listed in %s: %s",
            out_dir.name,
            len(skipped),
            out_dir / "skipped",
            " ".join(list(skipped)[:10]),
        )
    return num_frames, dim


def _kaldi_cmvn(kaldi_dir: Path, kaldi_set: Path, utt2spk: dict[str, str]) -> cmvn.Cmvn | None:
    """Kaldi's CMVN as its scripts apply it before splicing (cmvn_opts; default means only)."""
    scp = kaldi_set / "cmvn.scp"
    if not scp.is_file():
        return None
    opts = (kaldi_dir / "cmvn_opts").read_text() if (kaldi_dir / "cmvn_opts").is_file() else ""
    return cmvn.Cmvn(_cmvn_unit_of(scp, utt2spk), cmvn.read_stats(scp), utt2spk, "--norm-vars=true" in opts)


def _splice_context(kaldi_dir: Path) -> tuple[int, int]:
    path = kaldi_dir / "splice_opts"
    if not path.is_file():
        return 4, 4  # splice-feats' defaults
    opts = dict(o.lstrip("-").split("=", 1) for o in path.read_text().split() if "=" in o)
    try:
        return int(opts.get("left-context", 4)), int(opts.get("right-context", 4))
    except ValueError:
        raise InputError(f"{path}: expected --left-context=N --right-context=M") from None


def _write_stats(stats: dict[str, np.ndarray], tmp: Path, out_dir: Path, unit: str) -> None:
    cmvn.write_stats(stats, tmp, unit)
    if stats:
        repoint_scp(tmp / "cmvn.scp", out_dir.absolute() / "cmvn.ark")
