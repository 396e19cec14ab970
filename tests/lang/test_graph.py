"""HCLG from a hand-made lexicon, a hand-written ARPA LM and a monophone tree decodes to its
transcript when the acoustic scores favour that transcript's states; the pdf layout of
transition ids; the graph directory mkgraph writes."""

from __future__ import annotations

import json
from pathlib import Path

import kaldi_hmm_gmm
import kaldifst
import numpy as np
import pytest

from asr.lang.graph import grammar_fst, make_hclg, mkgraph
from asr.lang.langdir import Lang
from asr.lang.prepare import build_lang_dir
from asr.lang.search import decode_wfst, pdf_to_transition_loglikes, transition_id_pdfs
from asr.utils.errors import InputError

DICTIONARY = "#\nab  a b\nba  b a\nb  b\n"
# A bigram LM over the three words: `ab ba` likelier than the rest, the rest still possible.
ARPA = """\\data\\
ngram 1=6
ngram 2=2

\\1-grams:
-0.8\t<s>\t-0.3
-0.7\t</s>
-0.6\tab\t-0.2
-0.6\tba\t-0.2
-0.6\tb\t-0.2
-2.0\t<unk>\t0

\\2-grams:
-0.2\tab ba
-0.3\t<s> ab

\\end\\
"""


def monophone_model(lang: Lang):
    topo = lang.topology()
    phones = sorted(lang.silence_phones + lang.nonsilence_phones)
    tree = kaldi_hmm_gmm.monophone_context_dependency(phones, topo.get_phone_to_num_pdf_classes())
    return tree, kaldi_hmm_gmm.TransitionModel(tree, topo)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("graph")
    (tmp / "dict.text").write_text(DICTIONARY)
    (tmp / "lm.arpa").write_text(ARPA)
    build_lang_dir(tmp / "dict.text", tmp / "lang")
    lang = Lang.load(tmp / "lang")
    tree, trans_model = monophone_model(lang)
    hclg = make_hclg(lang, tree, trans_model, grammar_fst(tmp / "lm.arpa", lang))
    return tmp, lang, tree, trans_model, hclg


def state_pdfs(lang: Lang, tree, phones: list[str]) -> list[int]:
    """The pdfs of each phone's HMM states in order, 3 frames each."""
    topo = lang.topology()
    frames = []
    for name in phones:
        phone = lang.phones[name]
        frames += [tree.compute([phone], c)[1] for c in range(topo.num_pdf_classes(phone)) for _ in range(3)]
    return frames


def scores_for(frames: list[int], num_pdfs: int) -> np.ndarray:
    loglikes = np.full((len(frames), num_pdfs), -20.0, np.float32)
    loglikes[np.arange(len(frames)), frames] = 0.0
    return loglikes


@pytest.mark.parametrize(
    "phones, words",
    [
        (["sil", "a", "b", "b", "a", "sil"], ["ab", "ba"]),
        (["b", "sil", "b", "a"], ["b", "ba"]),  # against the LM's preference, no leading silence
        (["b", "a", "b", "a", "b"], ["ba", "ba", "b"]),
    ],
)
def test_hclg_decodes_to_the_transcript_the_scores_favour(setup, phones, words):
    _, lang, tree, trans_model, hclg = setup
    frames = state_pdfs(lang, tree, phones)
    loglikes = pdf_to_transition_loglikes(scores_for(frames, trans_model.num_pdfs), trans_model)
    word_ids, tids = decode_wfst(hclg, loglikes, trans_model, beam=13.0, max_active=7000)
    assert [lang.word_names[w] for w in word_ids] == words
    assert [trans_model.transition_id_to_pdf(t) for t in tids] == frames  # one transition id a frame


def test_hclg_has_no_disambiguation_symbols_left(setup):
    _, _, _, trans_model, hclg = setup
    labels = {arc.ilabel for s in range(hclg.num_states) for arc in kaldifst.ArcIterator(hclg, s)}
    # every input label is epsilon or a transition id: the disambiguation ids above them are gone
    assert labels <= set(range(trans_model.num_transition_ids + 1)) and len(labels) > 40


def test_transition_id_columns_hold_their_pdf(setup):
    _, _, _, trans_model, _ = setup
    pdfs = transition_id_pdfs(trans_model)
    assert len(pdfs) == trans_model.num_transition_ids
    assert [trans_model.transition_id_to_pdf(t) for t in range(1, trans_model.num_transition_ids + 1)] == list(pdfs)
    by_pdf = np.arange(2 * trans_model.num_pdfs, dtype=np.float32).reshape(2, -1)
    by_tid = pdf_to_transition_loglikes(by_pdf, trans_model)
    assert by_tid.shape == (2, trans_model.num_transition_ids)
    assert by_tid[1, 4] == by_pdf[1, trans_model.transition_id_to_pdf(5)]  # column 4 is transition id 5
    with pytest.raises(InputError, match="pdfs"):
        pdf_to_transition_loglikes(by_pdf[:, 1:], trans_model)
    with pytest.raises(InputError, match="transition ids"):
        decode_wfst(setup[4], by_pdf, trans_model)


def test_mkgraph_writes_the_graph_dir(setup):
    tmp, lang, _, _, _ = setup
    read = []

    def read_model(model_dir: Path):
        read.append(model_dir)
        return monophone_model(lang)

    record = mkgraph(lang.dir, tmp / "mono", tmp / "lm.arpa", tmp / "graph", read_model)
    assert read == [tmp / "mono"]
    assert {p.name for p in (tmp / "graph").iterdir()} == {"HCLG.fst", "G.fst", "words.txt", "phones.txt", "graph.json"}
    assert json.loads((tmp / "graph" / "graph.json").read_text())["HCLG_states"] == record["HCLG_states"] > 0
    assert kaldifst.StdVectorFst.read(str(tmp / "graph" / "HCLG.fst")).num_states == record["HCLG_states"]
    with pytest.raises(InputError, match="ARPA LM not found"):
        mkgraph(lang.dir, tmp / "mono", tmp / "none.arpa", tmp / "graph2", read_model)
