"""Kaldi's i-vector extractor (`final.ie`, what `ivector-extract` and the online extractor read), in
its binary `IvectorExtractor` format: `<IvectorExtractor> <w> DM <w_vec> DV <M> count DM...
<SigmaInv> DP... <IvectorOffset> double </IvectorExtractor>`, in double."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from asr.kaldi.binary import (
    BINARY_MARK,
    binary_file_reader,
    double_bytes,
    int32_bytes,
    matrix_bytes,
    packed_bytes,
    token_bytes,
    vector_bytes,
)
from asr.utils.atomic import atomic_path


def ivector_extractor_bytes(
    weights: np.ndarray, projections: np.ndarray, inv_covars: np.ndarray, prior_offset: float
) -> bytes:
    """An IvectorExtractor without log-weight regression (ivector-extractor-init
    --use-weights=false) in Kaldi's binary form: `projections` (C, D, R) are the M_c,
    `inv_covars` (C, D, D) the Sigma_c^-1, `weights` the UBM's (w_vec)."""
    return b"".join(
        [
            BINARY_MARK,
            token_bytes("<IvectorExtractor>"),
            token_bytes("<w>"),
            matrix_bytes(np.zeros((0, 0)), double=True),
            token_bytes("<w_vec>"),
            vector_bytes(weights, double=True),
            token_bytes("<M>"),
            int32_bytes(len(projections)),
            *(matrix_bytes(m, double=True) for m in projections),
            token_bytes("<SigmaInv>"),
            *(packed_bytes(p, double=True) for p in inv_covars),
            token_bytes("<IvectorOffset>"),
            double_bytes(prior_offset),
            token_bytes("</IvectorExtractor>"),
        ]
    )


def write_ivector_extractor(
    path: str | os.PathLike, weights: np.ndarray, projections: np.ndarray, inv_covars: np.ndarray, prior_offset: float
) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(ivector_extractor_bytes(weights, projections, inv_covars, prior_offset))


def read_ivector_extractor(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(w_vec, M (C, D, R), Sigma_inv (C, D, D), prior offset) from a Kaldi binary final.ie."""
    reader = binary_file_reader(Path(path), "IvectorExtractor", "ivector-extractor-copy --binary=true")
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
