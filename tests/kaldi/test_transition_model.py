"""The one reader of Kaldi's HMM topology and transition states: binary (final.mdl) and text
(what Kaldi's own TransitionModel::Write(binary=false) prints, through kaldi_hmm_gmm) read into
one type, kaldi_hmm_gmm's HmmTopology, and the transition ids map to the pdfs Kaldi gives them."""

import io

import kaldi_hmm_gmm as khg
import numpy as np
import pytest
from tests.fixtures.hybrid_corpus import binary_transition_model, hmm_system, text_transition_model
from tests.kaldi.test_alignments import CHAIN_ENTRIES, CHAIN_PDF_OF_TID, CHAIN_TUPLES

from asr.kaldi.binary import KaldiBinaryReader
from asr.kaldi.model import write_model
from asr.kaldi.transition_model import (
    TextTokens,
    pdf_of_transition_ids,
    read_text_topology,
    read_topology,
    read_transition_model,
    read_tuples,
)
from asr.utils.errors import InputError


def fields(topo: khg.HmmTopology):
    """phones, phone2idx and each state's (forward pdf class, self-loop pdf class, transitions)."""
    phones, phone2idx, entries = topo.__getstate__()
    return phones, phone2idx, [[s.__getstate__() for s in entry] for entry in entries]


def binary_reader(data: bytes, name: str = "final.mdl") -> KaldiBinaryReader:
    assert data[:2] == b"\0B"
    return KaldiBinaryReader(io.BytesIO(data[2:]), name, "transition model")


def binary_head(data: bytes):
    r = binary_reader(data)
    r.expect("<TransitionModel>")
    return read_topology(r), read_tuples(r)


def text_head(text: str):
    tokens = TextTokens(iter(text.splitlines()), "text")
    tokens.expect("<TransitionModel>")
    return read_text_topology(tokens), read_tuples(tokens)


def test_binary_and_kaldis_text_form_read_into_the_same_topology(tmp_path, mono_model, topology):
    tm, am = mono_model
    write_model(tmp_path / "final.mdl", tm, am)
    from_binary, binary_tuples = binary_head((tmp_path / "final.mdl").read_bytes())
    from_text, text_tuples = text_head(str(tm))  # Kaldi's own text Write
    assert isinstance(from_binary, khg.HmmTopology) and isinstance(from_text, khg.HmmTopology)
    assert fields(from_binary) == fields(from_text) == fields(topology)
    assert binary_tuples == text_tuples == [t.__getstate__() for t in tm.tuples]
    assert str(from_text) == str(topology)  # Kaldi's text Write of the topology we built


def test_the_pdf_of_each_transition_id_is_kaldis(tmp_path, mono_model):
    tm, am = mono_model
    write_model(tmp_path / "final.mdl", tm, am)
    topo, tuples = binary_head((tmp_path / "final.mdl").read_bytes())
    expected = [tm.transition_id_to_pdf(t) for t in range(1, tm.num_transition_ids + 1)]
    assert pdf_of_transition_ids(topo, tuples, ValueError)[1:] == expected
    full = read_transition_model(binary_reader((tmp_path / "final.mdl").read_bytes()))
    assert isinstance(full, khg.TransitionModel) and str(full.topo) == str(topo)


@pytest.mark.parametrize("system", ["hmm", "chain"])
def test_binary_and_text_agree_on_chain_style_topologies_too(system):
    entries, tuples = hmm_system() if system == "hmm" else (CHAIN_ENTRIES, CHAIN_TUPLES)
    from_binary, binary_tuples = binary_head(binary_transition_model(entries, tuples))
    from_text, text_tuples = text_head(text_transition_model(entries, tuples))
    assert fields(from_binary) == fields(from_text) and binary_tuples == text_tuples == tuples
    assert from_text.is_hmm == (system == "hmm")
    if system == "chain":
        assert pdf_of_transition_ids(from_text, text_tuples, ValueError) == CHAIN_PDF_OF_TID
    transitions = [t for _, entry in entries for *_, ts in entry for t in ts]
    assert np.allclose([t for e in fields(from_text)[2] for s in e for t in s[2]], transitions, atol=1e-6)


def test_a_transition_state_outside_the_topology_is_named(tmp_path):
    entries, tuples = hmm_system()
    topo, _ = text_head(text_transition_model(entries, tuples))
    with pytest.raises(InputError, match=r"final.mdl: .*transition state \(99, 0\) outside the topology"):
        pdf_of_transition_ids(topo, [(99, 0, 0, 0)], lambda what: InputError(f"final.mdl: {what}"))
