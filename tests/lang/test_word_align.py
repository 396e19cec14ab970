"""Word times from a transition-id path, on a real kaldi-hmm-gmm transition model."""

import kaldi_hmm_gmm as khg
import pytest

from asr.lang.word_align import PhoneSegment, WordSpan, phone_segments, word_spans
from asr.utils.errors import InputError

SIL, A, B, C = 1, 2, 3, 4
TOPO = """<Topology>
<TopologyEntry>
<ForPhones> 1 2 3 4 </ForPhones>
<State> 0 <PdfClass> 0 <Transition> 0 0.5 <Transition> 1 0.5 </State>
<State> 1 <PdfClass> 1 <Transition> 1 0.5 <Transition> 2 0.5 </State>
<State> 2 </State>
</TopologyEntry>
</Topology>
"""


@pytest.fixture(scope="module")
def trans_model():
    topo = khg.HmmTopology()
    topo.read(TOPO)
    tree = khg.monophone_context_dependency(
        phones=topo.phones, phone2num_pdf_classes=topo.get_phone_to_num_pdf_classes()
    )
    return khg.TransitionModel(ctx_dep=tree, hmm_topo=topo)


def path(trans_model, phones_and_lengths, reordered=False):
    """Transition ids of phones held for their frames (at least two): one frame in state 0, the rest
    in state 1, the last leaving the HMM."""
    ids = {}
    for tid in range(1, trans_model.num_transition_ids + 1):
        ids.setdefault(trans_model.transition_id_to_phone(tid), []).append(tid)
    tids = []
    for phone, length in phones_and_lengths:
        _, next0, loop1, exit1 = sorted(ids[phone])  # Kaldi numbers them in the topology's order
        if reordered:  # add-self-loops --reorder: a state's self-loops follow its forward transition
            tids += [next0, exit1] + [loop1] * (length - 2)
        else:
            tids += [next0] + [loop1] * (length - 2) + [exit1]
    return tids


def test_a_path_is_cut_at_the_frames_that_leave_each_phone(trans_model):
    tids = path(trans_model, [(SIL, 3), (A, 2), (B, 4)])
    assert phone_segments(tids, trans_model) == [PhoneSegment(SIL, 0, 3), PhoneSegment(A, 3, 5), PhoneSegment(B, 5, 9)]


def test_a_reordered_path_keeps_the_self_loops_after_a_phones_exit_in_that_phone(trans_model):
    tids = path(trans_model, [(SIL, 3), (A, 2), (B, 4)], reordered=True)
    assert phone_segments(tids, trans_model) == [PhoneSegment(SIL, 0, 3), PhoneSegment(A, 3, 5), PhoneSegment(B, 5, 9)]


def test_a_path_that_stops_inside_a_phone_is_refused(trans_model):
    with pytest.raises(InputError, match="ends inside a phone"):
        phone_segments(path(trans_model, [(A, 3)])[:-1], trans_model)


def test_words_take_their_pronunciations_and_skip_optional_silence(trans_model):
    segments = phone_segments(
        path(trans_model, [(SIL, 2), (A, 2), (B, 3), (SIL, 4), (A, 2), (C, 2), (SIL, 2)]), trans_model
    )
    prons = {10: [(A,), (A, B)], 11: [(A, C)]}  # word 10's short pronunciation must not be taken
    assert word_spans([10, 11], segments, prons, SIL) == [WordSpan(10, 2, 7), WordSpan(11, 11, 15)]


def test_a_partial_path_closes_its_last_phone_and_may_cut_its_last_word(trans_model):
    segments = phone_segments(path(trans_model, [(A, 2), (B, 3)])[:-1], trans_model, partial=True)
    assert segments == [PhoneSegment(A, 0, 2), PhoneSegment(B, 2, 4)]
    assert word_spans([11], segments[:1], {11: [(A, C)]}, SIL, partial=True) == [WordSpan(11, 0, 2)]


def test_phones_that_do_not_spell_the_words_are_refused(trans_model):
    segments = phone_segments(path(trans_model, [(A, 2), (C, 2)]), trans_model)
    with pytest.raises(InputError, match="do not spell"):
        word_spans([10], segments, {10: [(A, B)]}, SIL)
