"""pdf counts: Kaldi's text vector, as analyze-counts --binary=false writes it."""

import numpy as np
import pytest

from asr.kaldi.pdf_counts import read_pdf_counts, write_pdf_counts
from asr.utils.errors import InputError


def test_pdf_counts_are_a_kaldi_text_vector(tmp_path):
    write_pdf_counts(tmp_path / "pdf_counts", np.array([12, 0, 3]))
    assert (tmp_path / "pdf_counts").read_text() == " [ 12 0 3 ]\n"
    assert read_pdf_counts(tmp_path / "pdf_counts").tolist() == [12.0, 0.0, 3.0]
    (tmp_path / "plain").write_text("4 5\n6\n")
    assert read_pdf_counts(tmp_path / "plain").tolist() == [4.0, 5.0, 6.0]
    (tmp_path / "zero").write_text("[ 0 0 ]")
    with pytest.raises(InputError, match="positive sum"):
        read_pdf_counts(tmp_path / "zero")
