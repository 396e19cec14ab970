"""The pdf counts: how often each pdf (tied HMM state) is a training target of a frame_ce model.

Frame-CE training writes them into the experiment dir (`<exp_dir>/pdf_counts`); exporting
log-likelihoods for Kaldi's decoders divides the posteriors by the priors they give. A Kaldi
text vector, as `analyze-counts --binary=false` writes it, so Kaldi's own counts work too.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from asr.utils.atomic import write_text
from asr.utils.errors import InputError

PDF_COUNTS_NAME = "pdf_counts"  # in the experiment dir


def write_pdf_counts(path: str | os.PathLike, counts: np.ndarray) -> None:
    """Kaldi's text vector (` [ 120 0 37 ]`), as `analyze-counts --binary=false` writes it."""
    write_text(path, " [ " + " ".join(str(int(c)) for c in counts) + " ]\n")


def read_pdf_counts(path: str | os.PathLike) -> np.ndarray:
    """A Kaldi text vector of counts (brackets optional)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(
            f"{path}: pdf counts not found; train with train.objective=frame_ce first, or set decode.pdf_counts"
        )
    fields = path.read_text().replace("[", " ").replace("]", " ").split()
    try:
        counts = np.array([float(v) for v in fields], dtype=np.float64)
    except ValueError:
        raise InputError(f"{path}: expected a vector of counts (` [ 120 0 37 ]`)") from None
    if counts.size == 0 or (counts < 0).any() or counts.sum() <= 0:
        raise InputError(f"{path}: counts must be non-negative with a positive sum")
    return counts
