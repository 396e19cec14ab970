"""Kaldi's GMMs in their binary formats (floats as Kaldi's BaseFloat, float32):

* a diagonal GMM, `DiagGmm` (what `gmm-global-init-from-feats` writes as `final.dubm` and
  `gmm-global-*` read): `<DiagGMM> <GCONSTS> FV <WEIGHTS> FV <MEANS_INVVARS> FM <INV_VARS> FM
  </DiagGMM>`;
* a full-covariance GMM, `FullGmm` (`final.ubm`, what `fgmm-global-*` read): `<FullGMM>
  <GCONSTS> FV <WEIGHTS> FV <MEANS_INVCOVARS> FM <INV_COVARS> FP... </FullGMM>`, one packed
  lower triangle per component;
* the acoustic model of `final.mdl`, `AmDiagGmm` (`<DIMENSION> int <NUMPDFS> int DiagGmm...`),
  read into and written from kaldi_hmm_gmm's objects.
"""

from __future__ import annotations

import os
from pathlib import Path

import kaldi_hmm_gmm as khg
import numpy as np

from asr.kaldi.binary import (
    BINARY_MARK,
    KaldiBinaryReader,
    binary_file_reader,
    int32_bytes,
    matrix_bytes,
    packed_bytes,
    token_bytes,
    vector_bytes,
)
from asr.utils.atomic import atomic_path


def gconsts(weights: np.ndarray, means: np.ndarray, variances: np.ndarray) -> np.ndarray:
    """Kaldi's per-component constant: log w - D/2 log 2pi - 1/2 sum(log var + mean^2/var)."""
    dim = means.shape[1]
    return (
        np.log(weights)
        - 0.5 * dim * np.log(2 * np.pi)
        - 0.5 * (np.log(variances) + means * means / variances).sum(axis=1)
    )


def diag_gmm_fields_bytes(
    gconst: np.ndarray, weights: np.ndarray, means_invvars: np.ndarray, inv_vars: np.ndarray
) -> bytes:
    """DiagGmm::Write(binary=true) of the fields Kaldi stores."""
    return b"".join(
        [
            token_bytes("<DiagGMM>"),
            token_bytes("<GCONSTS>"),
            vector_bytes(gconst),
            token_bytes("<WEIGHTS>"),
            vector_bytes(weights),
            token_bytes("<MEANS_INVVARS>"),
            matrix_bytes(means_invvars),
            token_bytes("<INV_VARS>"),
            matrix_bytes(inv_vars),
            token_bytes("</DiagGMM>"),
        ]
    )


def diag_gmm_bytes(weights: np.ndarray, means: np.ndarray, variances: np.ndarray) -> bytes:
    """A DiagGmm file in Kaldi's binary form (what DiagGmm::Write(binary=true) emits)."""
    inv_vars = 1.0 / variances
    return BINARY_MARK + diag_gmm_fields_bytes(gconsts(weights, means, variances), weights, means * inv_vars, inv_vars)


def write_diag_gmm(path: str | os.PathLike, weights: np.ndarray, means: np.ndarray, variances: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(diag_gmm_bytes(weights, means, variances))


def read_diag_gmm_fields(reader: KaldiBinaryReader) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """DiagGmm::Read, binary branch: (weights, means times inverse variances, inverse variances)."""
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
    return weights, means_invvars, inv_vars


def read_diag_gmm(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weights, means, variances) from a Kaldi binary DiagGmm file (ours or Kaldi's)."""
    reader = binary_file_reader(Path(path), "DiagGmm", "gmm-global-copy --binary=true")
    weights, means_invvars, inv_vars = read_diag_gmm_fields(reader)
    if not (len(weights) == means_invvars.shape[0] == inv_vars.shape[0] and means_invvars.shape == inv_vars.shape):
        raise reader.fail("inconsistent sizes")
    return weights, means_invvars / inv_vars, 1.0 / inv_vars


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
            token_bytes("<FullGMM>"),
            token_bytes("<GCONSTS>"),
            vector_bytes(gconst),
            token_bytes("<WEIGHTS>"),
            vector_bytes(weights),
            token_bytes("<MEANS_INVCOVARS>"),
            matrix_bytes(means_invcovars),
            token_bytes("<INV_COVARS>"),
            *(packed_bytes(p) for p in inv_covars),
            token_bytes("</FullGMM>"),
        ]
    )


def write_full_gmm(path: str | os.PathLike, weights: np.ndarray, means: np.ndarray, covariances: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(full_gmm_bytes(weights, means, covariances))


def read_full_gmm(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weights, means, covariances) from a Kaldi binary FullGmm file (ours or Kaldi's)."""
    reader = binary_file_reader(Path(path), "FullGmm", "fgmm-global-copy --binary=true")
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


# --- kaldi_hmm_gmm's DiagGmm and AmDiagGmm (the acoustic model of final.mdl) ---------------------


def diag_gmm_object_bytes(gmm: khg.DiagGmm) -> bytes:
    """DiagGmm::Write(binary=true); the gconsts are recomputed first, as Kaldi requires them valid."""
    gmm.compute_gconsts()
    fields = (gmm.gconsts, gmm.weights, gmm.means_invvars, gmm.inv_vars)
    return diag_gmm_fields_bytes(*(np.asarray(field) for field in fields))


def am_diag_gmm_bytes(am: khg.AmDiagGmm) -> bytes:
    """AmDiagGmm::Write(binary=true)."""
    head = token_bytes("<DIMENSION>") + int32_bytes(am.dim) + token_bytes("<NUMPDFS>") + int32_bytes(am.num_pdfs)
    return head + b"".join(diag_gmm_object_bytes(am.get_pdf(pdf)) for pdf in range(am.num_pdfs))


def read_diag_gmm_object(r: KaldiBinaryReader) -> khg.DiagGmm:
    weights, means_invvars, inv_vars = read_diag_gmm_fields(r)
    if not (len(weights) == len(inv_vars) and means_invvars.shape == inv_vars.shape) or not len(weights):
        raise r.fail("a GMM with inconsistent sizes")
    if not (np.isfinite(inv_vars).all() and (inv_vars > 0).all() and np.isfinite(means_invvars).all()):
        raise r.fail("a GMM with non-finite or non-positive inverse variances")
    gmm = khg.DiagGmm.__new__(khg.DiagGmm)  # the pickle state is Kaldi's stored fields: no rounding
    gmm.__setstate__(tuple(a.astype(np.float32) for a in (weights, inv_vars, means_invvars)))
    gmm.compute_gconsts()
    return gmm


def read_am_diag_gmm(r: KaldiBinaryReader) -> khg.AmDiagGmm:
    r.expect("<DIMENSION>")
    dim = r.int32()
    r.expect("<NUMPDFS>")
    num_pdfs = r.int32()
    if dim < 1 or num_pdfs < 0:
        raise r.fail(f"dimension {dim}, {num_pdfs} pdfs")
    am = khg.AmDiagGmm()
    for _ in range(num_pdfs):
        gmm = read_diag_gmm_object(r)
        if gmm.dim != dim:
            raise r.fail(f"a {gmm.dim}-dim GMM in a {dim}-dim model")
        am.add_pdf(gmm)
    return am
