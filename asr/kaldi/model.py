"""Kaldi's `final.mdl` for kaldi_hmm_gmm objects: a TransitionModel followed by an AmDiagGmm.

    final.mdl = "\\0B" TransitionModel AmDiagGmm      (what gmm-init-mono, gmm-est write)

The transition model's format is in asr/kaldi/transition_model.py, the AmDiagGmm's in
asr/kaldi/gmm.py. Kaldi's own tools (gmm-info, ali-to-pdf, gmm-align-compiled) read the file,
and so does the hybrid training path's reader of transition ids (`asr.kaldi.alignments.read_pdf_map`).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import kaldi_hmm_gmm as khg

from asr.kaldi.binary import BINARY_MARK, KaldiBinaryReader
from asr.kaldi.gmm import am_diag_gmm_bytes, read_am_diag_gmm
from asr.kaldi.transition_model import read_transition_model, transition_model_bytes
from asr.utils.atomic import atomic_path
from asr.utils.errors import InputError
from asr.utils.record import verify


def model_bytes(tm: khg.TransitionModel, am: khg.AmDiagGmm) -> bytes:
    return BINARY_MARK + transition_model_bytes(tm) + am_diag_gmm_bytes(am)


def write_model(path: str | os.PathLike, tm: khg.TransitionModel, am: khg.AmDiagGmm) -> None:
    """`final.mdl` (binary), atomically."""
    if am.num_pdfs != tm.num_pdfs:
        raise ValueError(f"the acoustic model has {am.num_pdfs} pdfs, the transition model {tm.num_pdfs}")
    data = model_bytes(tm, am)
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(data)


def read_model(path: str | os.PathLike) -> tuple[khg.TransitionModel, khg.AmDiagGmm]:
    """(transition model, acoustic model) of a binary `final.mdl`; InputError naming the file if damaged."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: model not found; run the GMM stage (python -m asr.gmm) first")
    verify(path, "GMM model")
    data = path.read_bytes()
    r = KaldiBinaryReader(io.BytesIO(data[2:]), str(path), "GMM model (final.mdl)")
    if not data.startswith(BINARY_MARK):
        raise r.fail("no binary mark; convert a text model with `gmm-copy --binary=true`")
    tm = read_transition_model(r)
    am = read_am_diag_gmm(r)
    if am.num_pdfs != tm.num_pdfs:
        raise InputError(f"{path}: the acoustic model has {am.num_pdfs} pdfs, the transition model {tm.num_pdfs}")
    if r.stream.read(1):
        raise r.fail("bytes after the acoustic model")
    return tm, am
