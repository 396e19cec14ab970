"""The HMM transducer H (transition ids in, context-dependent phones out), built in Python
from kaldi_hmm_gmm's tree and transition model.

kaldi_hmm_gmm's own get_h_transducer and add_self_loops cannot be used with kaldifst: the two
wheels (kaldi-hmm-gmm 1.1.4, kaldifst 1.8.3) carry their own OpenFst builds, an FST of one is
refused by the other ("incompatible function arguments", "Unregistered type"), and importing
kaldifst before kaldi_hmm_gmm deadlocks in OpenFst's static initialisation. Only numbers cross
over here: the tree's pdfs, the transition model's tuples, transition ids and log-probabilities.

As Kaldi's GetHTransducer, each context window of CLG's input labels (compose_context's
ilabel info) becomes the HMM of its central phone, its pdfs from the tree; the HMMs hang off
one loop state that is start and final, entered by an arc with input epsilon and the window's
label as output. Unlike Kaldi (self-loops added after determinization, scaled by 0.1), the
self-loops are in H from the start, with their full log-probabilities: one arc per frame,
the loop of an HMM state before its forward transitions (Kaldi's non-reordered layout).
Disambiguation symbols of CLG map to new input ids above the transition ids.
"""

from __future__ import annotations

import kaldi_hmm_gmm
import kaldifst  # after kaldi_hmm_gmm: the other import order deadlocks


def transition_states(trans_model: kaldi_hmm_gmm.TransitionModel) -> dict[tuple[int, int, int, int], int]:
    """(phone, hmm state, forward pdf, self-loop pdf) -> transition state (1-based)."""
    return {tuple(t.__getstate__()): i + 1 for i, t in enumerate(trans_model.tuples)}


def _pdf(tree: kaldi_hmm_gmm.ContextDependency, window: list[int], pdf_class: int) -> int:
    ok, pdf = tree.compute(window, pdf_class)
    if not ok:
        raise ValueError(f"the tree has no pdf for phones {window}, pdf class {pdf_class}")
    return pdf


def _add_hmm(
    fst: kaldifst.StdVectorFst,
    loop: int,
    label: int,
    window: list[int],
    phone: int,
    tree: kaldi_hmm_gmm.ContextDependency,
    trans_model: kaldi_hmm_gmm.TransitionModel,
    states: dict[tuple[int, int, int, int], int],
) -> None:
    """The HMM of `phone` in context `window` from `loop` back to it, output `label` on entry."""
    topology = trans_model.topo.topology_for_phone(phone)
    final = len(topology) - 1  # the last topology state is the non-emitting exit
    fst_state = {s: fst.add_state() for s in range(final)}
    fst_state[final] = loop
    fst.add_arc(state=loop, arc=kaldifst.StdArc(0, label, 0.0, fst_state[0]))
    for s in range(final):
        hmm_state = topology[s]
        forward = _pdf(tree, window, hmm_state.forward_pdf_class)
        self_loop = _pdf(tree, window, hmm_state.self_loop_pdf_class)
        trans_state = states[(phone, s, forward, self_loop)]
        first = trans_model.state2id[trans_state]
        for index, (dest, _) in enumerate(hmm_state.transitions):
            tid = first + index
            cost = -trans_model.log_probs[tid]
            fst.add_arc(state=fst_state[s], arc=kaldifst.StdArc(tid, 0, cost, fst_state[dest]))


def h_transducer(
    ilabel_info: list[list[int]],
    tree: kaldi_hmm_gmm.ContextDependency,
    trans_model: kaldi_hmm_gmm.TransitionModel,
) -> tuple[kaldifst.StdVectorFst, list[int]]:
    """H with self-loops, output-label sorted, and the input ids of its disambiguation symbols."""
    fst = kaldifst.StdVectorFst()
    loop = fst.add_state()
    fst.start = loop
    fst.set_final(state=loop, weight=0)
    states = transition_states(trans_model)
    disambig_ids: list[int] = []
    for label, window in enumerate(ilabel_info):
        if label == 0 or not window:
            continue
        if len(window) == 1 and window[0] < 0:  # a disambiguation symbol: -(its phone id)
            disambig_ids.append(trans_model.num_transition_ids + 1 + len(disambig_ids))
            fst.add_arc(state=loop, arc=kaldifst.StdArc(disambig_ids[-1], label, 0.0, loop))
            continue
        phone = window[tree.central_position]
        if phone == 0:  # only context (the end of the utterance): nothing to emit
            fst.add_arc(state=loop, arc=kaldifst.StdArc(0, label, 0.0, loop))
            continue
        _add_hmm(fst, loop, label, list(window), phone, tree, trans_model, states)
    kaldifst.arcsort(fst, sort_type="olabel")
    return fst, disambig_ids
