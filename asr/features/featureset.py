"""A feature set: the features stage's output for one data set, as every later stage reads it.

    <features.feats_dir>/<features.name>/<set>/
        feats.scp, feats.ark   the matrices (kaldiio; Kaldi reads them as they are)
        feat_dim               the dimension per frame (what the model's input is built for)
        utt2num_frames         frames per utterance (so samplers work without reading a matrix)
        cmvn.scp, cmvn.ark, cmvn_type   CMVN statistics and their unit (asr/features/cmvn.py)

`FeatureReader` reads one set's matrices with CMVN applied; a matrix with NaN/inf values is
refused (NonFiniteFeatures) naming the utterance.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import Tensor

from asr.data import commands
from asr.data.datadir import c_sort_key, read_table
from asr.features.cmvn import CmvnApplier
from asr.utils.errors import InputError

log = logging.getLogger(__name__)


def feature_set_dir(cfg, set_name: str) -> Path:
    """`<features.feats_dir>/<features.name>/<set>`: where the features stage writes a set."""
    return Path(cfg.features.feats_dir) / cfg.features.name / set_name


def read_feat_dim(set_dir: str | os.PathLike) -> int:
    path = Path(set_dir) / "feat_dim"
    try:
        return int(path.read_text().split()[0])
    except FileNotFoundError:
        raise InputError(f"{path}: missing; run the features stage for this set") from None
    except (ValueError, IndexError):
        raise InputError(f"{path}: expected one integer (the feature dimension); re-run the features stage") from None


def read_num_frames(set_dir: Path, feats: dict) -> dict[str, int]:
    """utt2num_frames, or (for features made elsewhere without it) the matrices' lengths."""
    path = set_dir / "utt2num_frames"
    if path.is_file():
        try:
            return {u: int(n) for u, n in read_table(path).items()}
        except ValueError:
            raise InputError(f"{path}: frame counts must be integers; re-run the features stage") from None
    log.warning("%s: missing; reading every matrix to get its length", path)
    return {u: int(feats[u].shape[0]) for u in feats}


class NonFiniteFeatures(InputError):
    """A feature matrix with NaN or inf values: it would make every loss and output it enters
    NaN. The features stage never writes one; features made elsewhere can hold them."""


class FeatureReader:
    """Feature matrices of one set, CMVN applied, by utterance id. A matrix with NaN/inf
    values raises NonFiniteFeatures naming the utterance (decoding skips it, with a list)."""

    def __init__(self, feats_set_dir: str | os.PathLike, utt2spk: dict[str, str], norm_vars: bool = True):
        self.set_dir = Path(feats_set_dir)
        scp = self.set_dir / "feats.scp"
        if not scp.is_file():
            raise InputError(f"{scp}: missing; run the features stage for this set")
        self.feats = commands.load_scp(scp)
        self.num_frames = read_num_frames(self.set_dir, self.feats)
        self.feat_dim = read_feat_dim(self.set_dir)
        self.cmvn = CmvnApplier(self.set_dir, utt2spk, norm_vars)
        self.augment = None  # training-time masking (asr.features.specaugment), set by the trainer

    def utts(self) -> list[str]:
        return sorted(set(self.feats.keys()) & set(self.num_frames), key=c_sort_key)

    def __call__(self, utt: str, index: int = 0) -> Tensor:
        """`index`: the utterance's place in its dataset, which seeds its augmentation."""
        feats = checked_features(self.set_dir, utt, self.feat_dim, lambda: self.feats[utt], lambda mat: self.cmvn(utt, mat))
        return self.augment(feats, index) if self.augment is not None else feats


def checked_features(set_dir: Path, utt: str, feat_dim: int, read: Callable[[], np.ndarray],
                     normalise: Callable[[np.ndarray], np.ndarray]) -> Tensor:
    """One utterance's matrix from `read()`, normalised: an unreadable ark, a matrix of another
    width than feat_dim, or NaN/inf after normalisation is an InputError naming the utterance."""
    try:
        mat = read()
    except InputError:
        raise
    except Exception as err:  # kaldiio raises assorted errors for a truncated/missing ark
        raise InputError(f"{set_dir / 'feats.scp'}: cannot read features of {utt!r} ({err}); re-run the features stage") from None
    if mat.ndim != 2 or mat.shape[1] != feat_dim:
        raise InputError(f"{set_dir}: {utt!r} has shape {mat.shape}, expected (T, {feat_dim}) from feat_dim")
    normalised = normalise(mat)
    if not np.isfinite(normalised).all():
        where = "its features" if not np.isfinite(mat).all() else "its CMVN statistics (cmvn.scp)"
        raise NonFiniteFeatures(f"{set_dir / 'feats.scp'}: utterance {utt!r}: NaN/inf values in {where}; remove it "
                                "from the data dir, or make the features again (the features stage skips such utterances)")
    return torch.from_numpy(normalised)
