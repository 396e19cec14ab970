"""Kaldi matrices and per-speaker transforms, through kaldiio (Kaldi's binary `\\0B` + `FM`/`DM`
format, ark/scp):

  * one matrix a file (est-lda's `final.mat`);
  * per-speaker affine transforms as `trans.ark`/`trans.scp` (what `transform-feats
    --utt2spk=ark:utt2spk scp:trans.scp` reads), and applying a transform the way
    `transform-feats` does: a d x D matrix is linear, a d x (D+1) one has the offset last.
"""

from __future__ import annotations

import os
from pathlib import Path

import kaldiio
import numpy as np

from asr.kaldi import commands
from asr.kaldi.table import c_sort_key
from asr.utils.atomic import atomic_path
from asr.utils.errors import InputError
from asr.utils.record import verify_table


def write_matrix(path: str | os.PathLike, matrix: np.ndarray) -> None:
    """One Kaldi binary matrix file (like est-lda's final.mat), float32, atomically."""
    with atomic_path(path) as tmp:
        kaldiio.save_mat(str(tmp), np.ascontiguousarray(matrix, dtype=np.float32))


def read_matrix(path: str | os.PathLike) -> np.ndarray:
    try:
        return np.asarray(kaldiio.load_mat(str(path)), dtype=np.float64)
    except FileNotFoundError:
        raise InputError(f"{path}: missing Kaldi matrix; re-run the features stage") from None
    except Exception as err:  # kaldiio raises assorted errors for a damaged file
        raise InputError(f"{path}: not a readable Kaldi matrix ({err})") from None


def apply_transform(feats: np.ndarray, transform: np.ndarray) -> np.ndarray:
    """`transform-feats`: y = A x (d x D) or y = A x + b (d x (D+1), b the last column)."""
    dim = feats.shape[1]
    if transform.shape[1] == dim:
        out = feats @ transform.T
    elif transform.shape[1] == dim + 1:
        out = feats @ transform[:, :dim].T + transform[:, dim]
    else:
        raise InputError(
            f"transform of shape {transform.shape} does not apply to {dim}-dim features "
            f"(expected {dim} or {dim + 1} columns)"
        )
    return out.astype(np.float32)


def write_transforms(out_dir: str | os.PathLike, transforms: dict[str, np.ndarray], name: str = "trans") -> Path:
    """`<name>.ark` + `<name>.scp` keyed by speaker (sorted, C locale); returns the scp.

    The scp names the ark by its absolute path, so write into the final directory (or
    repoint the scp after renaming, as the feature driver does).
    """
    out_dir = Path(out_dir)
    ark, scp = out_dir / f"{name}.ark", out_dir / f"{name}.scp"
    with kaldiio.WriteHelper(f"ark,scp:{ark.absolute()},{scp}") as writer:
        for key in sorted(transforms, key=c_sort_key):
            writer(key, np.ascontiguousarray(transforms[key], dtype=np.float32))
    return scp


def write_transform_ark(path: str | os.PathLike, transforms: dict[str, np.ndarray]) -> None:
    """One archive of per-speaker transforms (as Kaldi's trans.JOB), keys sorted, atomically:
    an archive names no path, so it stays valid wherever its directory is moved."""
    with atomic_path(path) as tmp, kaldiio.WriteHelper(f"ark:{tmp}") as writer:
        for key in sorted(transforms, key=c_sort_key):
            writer(key, np.ascontiguousarray(transforms[key], dtype=np.float32))


def read_transform_ark(path: str | os.PathLike) -> dict[str, np.ndarray]:
    try:
        return {k: np.asarray(v, dtype=np.float64) for k, v in kaldiio.load_ark(str(path))}
    except FileNotFoundError:
        raise InputError(f"{path}: missing transforms; train the system again") from None
    except Exception as err:
        raise InputError(f"{path}: not a Kaldi archive of transforms ({err})") from None


def read_transforms(scp: str | os.PathLike) -> dict[str, np.ndarray]:
    """A `trans.scp` (Kaldi's or ours): speaker -> d x (d+1) (or d x d) float64 matrix."""
    if not Path(scp).is_file():
        raise InputError(f"{scp}: missing transforms; re-run the features stage")
    verify_table(scp, "fMLLR transforms")
    try:
        return {k: np.asarray(v, dtype=np.float64) for k, v in commands.load_scp(scp).items()}
    except Exception as err:
        raise InputError(f"{scp}: cannot read the transforms it names ({err})") from None
