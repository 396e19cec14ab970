"""Kaldi's transition model and its HMM topology: one reader, into kaldi_hmm_gmm's objects, and one writer.

    TransitionModel = <TransitionModel> Topology (<Triples>|<Tuples>) n tuple... (</Triples>|</Tuples>)
                      <LogProbs> FV </LogProbs> </TransitionModel>
    Topology        = <Topology> phones phone2idx [-1] entries... </Topology>   (-1: not an HMM,
                      i.e. a state's forward and self-loop pdf classes differ; tuples then have 4 ints)

The bindings pickle these objects as tuples of their fields, not in Kaldi's format, so the bytes
are written here from those fields, as TransitionModel::Write and HmmTopology::Write (binary)
emit them; reading rebuilds the objects through the same pickle state, the derived tables
computed as Kaldi's ComputeDerived does. The topology is read from the binary form (`final.mdl`)
or the text form (`copy-transition-model --binary=false`) into one type, `khg.HmmTopology`; the
transition ids' pdfs (`pdf_of_transition_ids`, what ali-to-pdf uses) are derived from it.
"""

from __future__ import annotations

import math
from typing import Callable, Iterator

import _kaldi_hmm_gmm
import kaldi_hmm_gmm as khg
import numpy as np

from asr.kaldi.binary import KaldiBinaryReader, int32_bytes, int32_vector_bytes, token_bytes, vector_bytes
from asr.utils.errors import InputError

NO_PDF = -1  # Kaldi's kNoPdf: the final, non-emitting state of a topology entry
Fail = Callable[[str], Exception]  # the error to raise, given what is wrong


# --- writing -----------------------------------------------------------------------------------


def topology_is_hmm(entries: list) -> bool:
    """Kaldi's HmmTopology::IsHmm: every state's forward and self-loop pdf class agree."""
    return all(s.forward_pdf_class == s.self_loop_pdf_class for entry in entries for s in entry)


def topology_bytes(topo: khg.HmmTopology) -> bytes:
    phones, phone2idx, entries = topo.__getstate__()
    is_hmm = topology_is_hmm(entries)
    out = [token_bytes("<Topology>"), int32_vector_bytes(phones), int32_vector_bytes(phone2idx)]
    if not is_hmm:
        out.append(int32_bytes(-1))
    out.append(int32_bytes(len(entries)))
    for entry in entries:
        out.append(int32_bytes(len(entry)))
        for state in entry:
            out.append(int32_bytes(state.forward_pdf_class))
            if not is_hmm:
                out.append(int32_bytes(state.self_loop_pdf_class))
            out.append(int32_bytes(len(state.transitions)))
            for destination, prob in state.transitions:
                out.append(int32_bytes(destination) + b"\4" + np.float32(prob).astype("<f4").tobytes())
    out.append(token_bytes("</Topology>"))
    return b"".join(out)


def transition_model_bytes(tm: khg.TransitionModel) -> bytes:
    """TransitionModel::Write(binary=true)."""
    is_hmm = topology_is_hmm(tm.topo.__getstate__()[2])
    kind = "Triples" if is_hmm else "Tuples"
    out = [token_bytes("<TransitionModel>"), topology_bytes(tm.topo), token_bytes(f"<{kind}>")]
    tuples = [t.__getstate__() for t in tm.tuples]
    out.append(int32_bytes(len(tuples)))
    for phone, hmm_state, forward_pdf, self_loop_pdf in tuples:
        out += [int32_bytes(phone), int32_bytes(hmm_state), int32_bytes(forward_pdf)]
        if not is_hmm:
            out.append(int32_bytes(self_loop_pdf))
    out += [token_bytes(f"</{kind}>"), token_bytes("<LogProbs>"), vector_bytes(np.asarray(tm.log_probs))]
    out += [token_bytes("</LogProbs>"), token_bytes("</TransitionModel>")]
    return b"".join(out)


# --- reading the binary form ---------------------------------------------------------------------


def read_topology(r: KaldiBinaryReader) -> khg.HmmTopology:
    """HmmTopology::Read, binary branch."""
    r.expect("<Topology>")
    phones, phone2idx = r.int_vector(), r.int_vector()
    num_entries = r.int32()
    separate_self_loop = num_entries == -1
    if separate_self_loop:
        num_entries = r.int32()
    entries = []
    for _ in range(num_entries):
        states = []
        for _ in range(r.int32()):
            forward = r.int32()
            self_loop = r.int32() if separate_self_loop else forward
            transitions = [(r.int32(), r.float32()) for _ in range(r.int32())]
            states.append(_state(forward, self_loop, transitions))
        entries.append(states)
    r.expect("</Topology>")
    if not phones or any(p >= len(phone2idx) or not 0 <= phone2idx[p] < len(entries) for p in phones):
        raise r.fail("a topology phone without an entry")
    topo = khg.HmmTopology.__new__(khg.HmmTopology)
    topo.__setstate__((phones, phone2idx, entries))
    return topo


def read_tuples(r: KaldiBinaryReader | TextTokens) -> list[tuple[int, int, int, int]]:
    """The transition states, binary or text: (phone, HMM state, forward pdf, self-loop pdf), 3 ints
    each in an HMM's <Triples> (the two pdfs equal), 4 in <Tuples>."""
    kind = r.expect("<Triples>", "<Tuples>")
    tuples = []
    for _ in range(r.int32()):
        phone, hmm_state, forward = r.int32(), r.int32(), r.int32()
        tuples.append((phone, hmm_state, forward, r.int32() if kind == "<Tuples>" else forward))
    r.expect(kind.replace("<", "</"))
    return tuples


def entries_by_phone(topo: khg.HmmTopology) -> dict[int, list]:
    phones, phone2idx, entries = topo.__getstate__()
    return {phone: entries[phone2idx[phone]] for phone in phones}


def pdf_of_transition_ids(topo: khg.HmmTopology, tuples: list[tuple[int, int, int, int]], fail: Fail) -> list[int]:
    """The pdf of each transition id, as TransitionModel::TransitionIdToPdf (entry 0, never an id, NO_PDF)."""
    _, _, id2pdf, _ = derived_tables(entries_by_phone(topo), tuples, fail)
    return [NO_PDF] + id2pdf[1:]


def _state(forward: int, self_loop: int, transitions: list[tuple[int, float]]):
    state = _kaldi_hmm_gmm.HmmState.__new__(_kaldi_hmm_gmm.HmmState)
    state.__setstate__((forward, self_loop, transitions))
    return state


def derived_tables(topo_entries: dict[int, list], tuples: list[tuple[int, int, int, int]], fail: Fail):
    """(state2id, id2state, id2pdf_id, num_pdfs) as TransitionModel::ComputeDerived makes them:
    transition states are the tuples, 1-based; each gets one id per transition out of its HMM
    state, numbered from 1; a self-loop's id maps to the self-loop pdf, the others to the forward pdf."""
    state2id, id2state, id2pdf = [0], [0], [0]
    num_pdfs = 0
    for tstate, (phone, hmm_state, forward_pdf, self_loop_pdf) in enumerate(tuples, 1):
        entry = topo_entries.get(phone)
        if entry is None or not 0 <= hmm_state < len(entry):
            raise fail(f"transition state ({phone}, {hmm_state}) outside the topology")
        state2id.append(len(id2state))
        num_pdfs = max(num_pdfs, forward_pdf + 1, self_loop_pdf + 1)
        for destination, _ in entry[hmm_state].transitions:
            id2state.append(tstate)
            id2pdf.append(self_loop_pdf if destination == hmm_state else forward_pdf)
    state2id.append(len(id2state))
    return state2id, id2state, id2pdf, num_pdfs


def non_self_loop_log_probs(topo_entries: dict[int, list], tuples: list, log_probs: list[float]) -> list[float]:
    """TransitionModel::ComputeDerivedOfProbs: log(1 - self-loop prob) per transition state."""
    out, tid = [0.0], 1
    for phone, hmm_state, _, _ in tuples:
        value = 0.0
        for destination, _ in topo_entries[phone][hmm_state].transitions:
            if destination == hmm_state:
                stay = float(np.float32(math.exp(log_probs[tid])))
                value = float(np.float32(math.log(max(1.0 - stay, 1e-10))))
            tid += 1
        out.append(value)
    return out


def read_transition_model(r: KaldiBinaryReader) -> khg.TransitionModel:
    """TransitionModel::Read, binary branch."""
    r.expect("<TransitionModel>")
    topo = read_topology(r)
    tuples = read_tuples(r)
    r.expect("<LogProbs>")
    log_probs = [float(v) for v in r.vector()]
    r.expect("</LogProbs>")
    r.expect("</TransitionModel>")
    by_phone = entries_by_phone(topo)
    state2id, id2state, id2pdf, num_pdfs = derived_tables(by_phone, tuples, r.fail)
    if len(log_probs) != len(id2state):
        raise r.fail(f"{len(log_probs)} transition log-probabilities for {len(id2state) - 1} transition ids")
    tm = khg.TransitionModel.__new__(khg.TransitionModel)
    tm.__setstate__(
        (
            [_kaldi_hmm_gmm.TransitionModelTuple(*t) for t in tuples],
            topo,
            state2id,
            id2state,
            id2pdf,
            num_pdfs,
            log_probs,
            non_self_loop_log_probs(by_phone, tuples, log_probs),
        )
    )
    return tm


# --- reading the text form (copy-transition-model --binary=false, the head of a text final.mdl) ---


class TextTokens:
    """Whitespace-separated tokens of a text Kaldi object, read lazily (a text final.mdl holds
    every Gaussian after the part we need)."""

    def __init__(self, lines: Iterator[str], source: str):
        self.source = source
        self._tokens = (tok for line in lines for tok in line.split())

    def next(self) -> str:
        token = next(self._tokens, None)
        if token is None:
            raise InputError(f"{self.source}: ends inside the transition model; is it complete?")
        return token

    def expect(self, *wanted: str) -> str:
        got = self.next()
        if got not in wanted:
            raise InputError(f"{self.source}: expected {' or '.join(wanted)}, got {got[:40]!r}")
        return got

    def int(self) -> int:
        token = self.next()
        try:
            return int(token)
        except ValueError:
            raise InputError(f"{self.source}: expected an integer, got {token[:40]!r}") from None

    def float(self) -> float:
        token = self.next()
        try:
            return float(token)
        except ValueError:
            raise InputError(f"{self.source}: expected a number, got {token[:40]!r}") from None

    int32 = int  # so that read_tuples reads either form


def read_text_state(tokens: TextTokens, index: int):
    """`<State> i [<PdfClass> p | <ForwardPdfClass> f <SelfLoopPdfClass> s] (<Transition> d prob)* </State>`."""
    if tokens.int() != index:
        raise InputError(f"{tokens.source}: topology states must be numbered from 0 in order")
    token = tokens.next()
    forward = self_loop = NO_PDF
    if token == "<PdfClass>":
        forward = self_loop = tokens.int()
        token = tokens.next()
    elif token == "<ForwardPdfClass>":
        forward = tokens.int()
        tokens.expect("<SelfLoopPdfClass>")
        self_loop = tokens.int()
        token = tokens.next()
    transitions = []
    while token == "<Transition>":
        transitions.append((tokens.int(), tokens.float()))
        token = tokens.next()
    if token != "</State>":
        raise InputError(f"{tokens.source}: unexpected {token[:40]!r} in a topology state")
    return _state(forward, self_loop, transitions)


def read_text_topology(tokens: TextTokens) -> khg.HmmTopology:
    """HmmTopology::Read, text branch: `<Topology> (<TopologyEntry> <ForPhones> p... </ForPhones>
    <State>... </TopologyEntry>)... </Topology>`; a phone listed twice keeps its last entry."""
    tokens.expect("<Topology>")
    entry_of: dict[int, int] = {}
    entries = []
    while (token := tokens.next()) != "</Topology>":
        if token != "<TopologyEntry>":
            raise InputError(f"{tokens.source}: expected <TopologyEntry> or </Topology>, got {token[:40]!r}")
        tokens.expect("<ForPhones>")
        while (token := tokens.next()) != "</ForPhones>":
            entry_of[int(token)] = len(entries)
        states = []
        while (token := tokens.next()) != "</TopologyEntry>":
            if token != "<State>":
                raise InputError(f"{tokens.source}: expected <State> or </TopologyEntry>, got {token[:40]!r}")
            states.append(read_text_state(tokens, len(states)))
        entries.append(states)
    if not entry_of:
        raise InputError(f"{tokens.source}: a topology without phones")
    phone2idx = [-1] * (max(entry_of) + 1)
    for phone, index in entry_of.items():
        phone2idx[phone] = index
    topo = khg.HmmTopology.__new__(khg.HmmTopology)
    topo.__setstate__((sorted(entry_of), phone2idx, entries))
    return topo
