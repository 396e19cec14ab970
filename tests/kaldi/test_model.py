"""final.mdl: Kaldi's binary TransitionModel + AmDiagGmm, read back by the bindings and by the
hybrid training path's reader (asr/kaldi/alignments.py) with the same transition-id -> pdf map."""

import io

import numpy as np
import pytest

from asr.kaldi.model import read_model, write_model
from asr.kaldi.alignments import read_text_pdf_map, read_pdf_map
from asr.utils.errors import InputError


def gmm_fields(am):
    return [
        tuple(np.asarray(a) for a in (g.weights, g.inv_vars, g.means_invvars, g.gconsts))
        for g in (am.get_pdf(i) for i in range(am.num_pdfs))
    ]


def test_round_trip_through_the_bindings(tmp_path, mono_model):
    tm, am = mono_model
    write_model(tmp_path / "final.mdl", tm, am)
    tm2, am2 = read_model(tmp_path / "final.mdl")
    assert str(tm2) == str(tm)  # Kaldi's own text Write of both
    state, state2 = tm.__getstate__(), tm2.__getstate__()
    assert [t.__getstate__() for t in state[0]] == [t.__getstate__() for t in state2[0]]
    assert state[2:6] == state2[2:6]  # state2id, id2state, id2pdf_id, num_pdfs as ComputeDerived makes them
    np.testing.assert_allclose(state2[6], state[6], rtol=0, atol=0)
    np.testing.assert_allclose(state2[7], state[7], rtol=1e-6, atol=1e-6)
    assert (am2.dim, am2.num_pdfs, am2.num_gauss) == (am.dim, am.num_pdfs, am.num_gauss)
    for a, b in zip(gmm_fields(am), gmm_fields(am2)):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    feats = np.random.default_rng(1).normal(size=4).astype(np.float32)
    assert am2.log_likelihood(pdf_index=3, data=feats) == am.log_likelihood(pdf_index=3, data=feats)
    assert (tmp_path / "final.mdl").read_bytes() == write_and_read_bytes(tmp_path, tm2, am2)


def write_and_read_bytes(tmp_path, tm, am):
    write_model(tmp_path / "again.mdl", tm, am)
    return (tmp_path / "again.mdl").read_bytes()


def test_the_hybrid_reader_maps_transition_ids_as_the_bindings(tmp_path, mono_model):
    tm, am = mono_model
    write_model(tmp_path / "final.mdl", tm, am)
    ours = read_pdf_map(tmp_path / "final.mdl")
    kaldi_text = read_text_pdf_map(io.StringIO(str(tm)), "text")  # Kaldi's text Write, parsed
    expected = [tm.transition_id_to_pdf(t) for t in range(1, tm.num_transition_ids + 1)]
    assert ours.pdf_of[1:].tolist() == expected == kaldi_text.pdf_of[1:].tolist()
    assert ours.num_pdfs == tm.num_pdfs == am.num_pdfs


def test_damaged_files_are_input_errors(tmp_path, mono_model):
    tm, am = mono_model
    path = tmp_path / "final.mdl"
    write_model(path, tm, am)
    data = path.read_bytes()
    for damaged in (data[: len(data) // 2], data[:-3], b"\0B<TransitionModel> " + b"\xff" * 80, data[2:], data + b"x"):
        path.write_bytes(damaged)
        with pytest.raises(InputError, match="final.mdl"):
            read_model(path)
    with pytest.raises(InputError, match="not found"):
        read_model(tmp_path / "missing.mdl")
