"""Kaldi file formats for the models and transforms the feature stage makes.

Matrices and tables of matrices go through kaldiio (Kaldi's binary `\\0B` + `FM`/`DM`
format, ark/scp). This module adds what kaldiio does not have:

  * a diagonal GMM in Kaldi's `DiagGmm` binary format (what `gmm-global-init-from-feats`
    writes as `final.dubm` and `gmm-global-*` read): `<DiagGMM> <GCONSTS> FV <WEIGHTS> FV
    <MEANS_INVVARS> FM <INV_VARS> FM </DiagGMM>`, floats as Kaldi's BaseFloat (float32);
  * a full-covariance GMM in Kaldi's `FullGmm` binary format (`final.ubm`, what
    `fgmm-global-*` read): `<FullGMM> <GCONSTS> FV <WEIGHTS> FV <MEANS_INVCOVARS> FM
    <INV_COVARS> FP... </FullGMM>`, one packed lower triangle per component;
  * an i-vector extractor in Kaldi's `IvectorExtractor` binary format (`final.ie`, what
    `ivector-extract` and the online extractor read): `<IvectorExtractor> <w> DM <w_vec> DV
    <M> count DM... <SigmaInv> DP... <IvectorOffset> double </IvectorExtractor>`, in double;
  * per-speaker affine transforms as `trans.ark`/`trans.scp` (what `transform-feats
    --utt2spk=ark:utt2spk scp:trans.scp` reads), and applying a transform the way
    `transform-feats` does: a d x D matrix is linear, a d x (D+1) one has the offset last.
"""

from __future__ import annotations

import io
import os
import struct
from pathlib import Path

import kaldiio
import numpy as np

from asr.kaldi import commands
from asr.kaldi.binary import KaldiBinaryReader
from asr.kaldi.table import c_sort_key
from asr.utils.atomic import atomic_path
from asr.utils.errors import InputError

BINARY_MARK = b"\0B"


# ----------------------------------------------------------------------- matrices


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


def read_transforms(scp: str | os.PathLike) -> dict[str, np.ndarray]:
    """A `trans.scp` (Kaldi's or ours): speaker -> d x (d+1) (or d x d) float64 matrix."""
    if not Path(scp).is_file():
        raise InputError(f"{scp}: missing transforms; re-run the features stage")
    try:
        return {k: np.asarray(v, dtype=np.float64) for k, v in commands.load_scp(scp).items()}
    except Exception as err:
        raise InputError(f"{scp}: cannot read the transforms it names ({err})") from None


# ------------------------------------------------------------------- DiagGmm I/O


def gconsts(weights: np.ndarray, means: np.ndarray, variances: np.ndarray) -> np.ndarray:
    """Kaldi's per-component constant: log w - D/2 log 2pi - 1/2 sum(log var + mean^2/var)."""
    dim = means.shape[1]
    return (
        np.log(weights)
        - 0.5 * dim * np.log(2 * np.pi)
        - 0.5 * (np.log(variances) + means * means / variances).sum(axis=1)
    )


def _token(name: str) -> bytes:
    return name.encode() + b" "


def _vector(values: np.ndarray, double: bool = False) -> bytes:
    values = np.ascontiguousarray(values, dtype="<f8" if double else "<f4")
    return (b"DV " if double else b"FV ") + _int32(len(values)) + values.tobytes()


def _matrix(values: np.ndarray, double: bool = False) -> bytes:
    values = np.ascontiguousarray(values, dtype="<f8" if double else "<f4")
    rows, cols = values.shape
    return (b"DM " if double else b"FM ") + _int32(rows) + _int32(cols) + values.tobytes()


def _packed(symmetric: np.ndarray, double: bool = False) -> bytes:
    """A Kaldi SpMatrix: the lower triangle, row by row."""
    rows = symmetric.shape[0]
    lower = np.asarray(symmetric)[np.tril_indices(rows)]
    return (
        (b"DP " if double else b"FP ")
        + _int32(rows)
        + np.ascontiguousarray(lower, dtype="<f8" if double else "<f4").tobytes()
    )


def _int32(value: int) -> bytes:
    return b"\4" + struct.pack("<i", value)


def _double(value: float) -> bytes:
    return b"\10" + struct.pack("<d", value)


def diag_gmm_bytes(weights: np.ndarray, means: np.ndarray, variances: np.ndarray) -> bytes:
    """A DiagGmm in Kaldi's binary form (what DiagGmm::Write(binary=true) emits)."""
    inv_vars = 1.0 / variances
    return b"".join(
        [
            BINARY_MARK,
            _token("<DiagGMM>"),
            _token("<GCONSTS>"),
            _vector(gconsts(weights, means, variances)),
            _token("<WEIGHTS>"),
            _vector(weights),
            _token("<MEANS_INVVARS>"),
            _matrix(means * inv_vars),
            _token("<INV_VARS>"),
            _matrix(inv_vars),
            _token("</DiagGMM>"),
        ]
    )


def write_diag_gmm(path: str | os.PathLike, weights: np.ndarray, means: np.ndarray, variances: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(diag_gmm_bytes(weights, means, variances))


def read_diag_gmm(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weights, means, variances) from a Kaldi binary DiagGmm file (ours or Kaldi's)."""
    reader = _binary_reader(Path(path), "DiagGmm", "gmm-global-copy --binary=true")
    reader.expect("<DiagGMM>", "<DiagGMMBegin>")
    if reader.expect("<GCONSTS>", "<WEIGHTS>") == "<GCONSTS>":
        reader.vector()  # recomputed from the parameters
        reader.expect("<WEIGHTS>")
    weights = reader.vector()
    reader.expect("<MEANS_INVVARS>")
    means_invvars = reader.matrix()
    reader.expect("<INV_VARS>")
    inv_vars = reader.matrix()
    reader.expect("</DiagGMM>", "<DiagGMMEnd>")
    if not (len(weights) == means_invvars.shape[0] == inv_vars.shape[0] and means_invvars.shape == inv_vars.shape):
        raise reader.fail("inconsistent sizes")
    return weights, means_invvars / inv_vars, 1.0 / inv_vars


def _binary_reader(path: Path, kind: str, how_to_convert: str) -> KaldiBinaryReader:
    if not path.is_file():
        raise InputError(f"{path}: missing {kind}; re-run the features stage")
    data = path.read_bytes()
    reader = KaldiBinaryReader(io.BytesIO(data[2:]), str(path), kind)
    if not data.startswith(BINARY_MARK):
        raise reader.fail(f"no binary mark; convert text models with {how_to_convert}")
    return reader


# ------------------------------------------------------------------- FullGmm I/O


def full_gmm_bytes(weights: np.ndarray, means: np.ndarray, covariances: np.ndarray) -> bytes:
    """A FullGmm in Kaldi's binary form (what FullGmm::Write(binary=true) emits)."""
    inv_covars = np.linalg.inv(covariances)
    means_invcovars = np.einsum("cij,cj->ci", inv_covars, means)
    logdet = np.linalg.slogdet(inv_covars)[1]
    dim = means.shape[1]
    gconst = (
        np.log(weights)
        + 0.5 * logdet
        - 0.5 * dim * np.log(2 * np.pi)
        - 0.5 * np.einsum("ci,ci->c", means, means_invcovars)
    )
    return b"".join(
        [
            BINARY_MARK,
            _token("<FullGMM>"),
            _token("<GCONSTS>"),
            _vector(gconst),
            _token("<WEIGHTS>"),
            _vector(weights),
            _token("<MEANS_INVCOVARS>"),
            _matrix(means_invcovars),
            _token("<INV_COVARS>"),
            *(_packed(p) for p in inv_covars),
            _token("</FullGMM>"),
        ]
    )


def write_full_gmm(path: str | os.PathLike, weights: np.ndarray, means: np.ndarray, covariances: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(full_gmm_bytes(weights, means, covariances))


def read_full_gmm(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weights, means, covariances) from a Kaldi binary FullGmm file (ours or Kaldi's)."""
    reader = _binary_reader(Path(path), "FullGmm", "fgmm-global-copy --binary=true")
    reader.expect("<FullGMM>", "<FullGMMBegin>")
    if reader.expect("<GCONSTS>", "<WEIGHTS>") == "<GCONSTS>":
        reader.vector()  # recomputed from the parameters
        reader.expect("<WEIGHTS>")
    weights = reader.vector()
    reader.expect("<MEANS_INVCOVARS>")
    means_invcovars = reader.matrix()
    reader.expect("<INV_COVARS>")
    inv_covars = np.stack([reader.packed() for _ in range(len(weights))]) if len(weights) else np.zeros((0, 0, 0))
    reader.expect("</FullGMM>", "<FullGMMEnd>")
    if not (
        len(weights) == means_invcovars.shape[0] == inv_covars.shape[0]
        and means_invcovars.shape[1] == inv_covars.shape[1]
    ):
        raise reader.fail("inconsistent sizes")
    covariances = np.linalg.inv(inv_covars)
    return weights, np.einsum("cij,cj->ci", covariances, means_invcovars), covariances


# ------------------------------------------------------------ IvectorExtractor I/O


def ivector_extractor_bytes(
    weights: np.ndarray, projections: np.ndarray, inv_covars: np.ndarray, prior_offset: float
) -> bytes:
    """An IvectorExtractor without log-weight regression (ivector-extractor-init
    --use-weights=false) in Kaldi's binary form: `projections` (C, D, R) are the M_c,
    `inv_covars` (C, D, D) the Sigma_c^-1, `weights` the UBM's (w_vec)."""
    return b"".join(
        [
            BINARY_MARK,
            _token("<IvectorExtractor>"),
            _token("<w>"),
            _matrix(np.zeros((0, 0)), double=True),
            _token("<w_vec>"),
            _vector(weights, double=True),
            _token("<M>"),
            _int32(len(projections)),
            *(_matrix(m, double=True) for m in projections),
            _token("<SigmaInv>"),
            *(_packed(p, double=True) for p in inv_covars),
            _token("<IvectorOffset>"),
            _double(prior_offset),
            _token("</IvectorExtractor>"),
        ]
    )


def write_ivector_extractor(
    path: str | os.PathLike, weights: np.ndarray, projections: np.ndarray, inv_covars: np.ndarray, prior_offset: float
) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(ivector_extractor_bytes(weights, projections, inv_covars, prior_offset))


def read_ivector_extractor(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(w_vec, M (C, D, R), Sigma_inv (C, D, D), prior offset) from a Kaldi binary final.ie."""
    reader = _binary_reader(Path(path), "IvectorExtractor", "ivector-extractor-copy --binary=true")
    reader.expect("<IvectorExtractor>")
    reader.expect("<w>")
    if reader.matrix().size:
        raise reader.fail("log-weight regression (--use-weights=true) is not supported")
    reader.expect("<w_vec>")
    weights = reader.vector()
    reader.expect("<M>")
    count = reader.int32()
    projections = np.stack([reader.matrix() for _ in range(count)])
    reader.expect("<SigmaInv>")
    inv_covars = np.stack([reader.packed() for _ in range(count)])
    reader.expect("<IvectorOffset>")
    prior_offset = reader.double()
    reader.expect("</IvectorExtractor>")
    if len(weights) != count or projections.shape[1] != inv_covars.shape[1]:
        raise reader.fail("inconsistent sizes")
    return weights, projections, inv_covars, prior_offset
