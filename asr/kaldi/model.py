"""Kaldi's `final.mdl` for kaldi_hmm_gmm objects: a TransitionModel followed by an AmDiagGmm.

    final.mdl = "\\0B" TransitionModel AmDiagGmm      (what gmm-init-mono, gmm-est write)

    TransitionModel = <TransitionModel> Topology (<Triples>|<Tuples>) n tuple... (</Triples>|</Tuples>)
                      <LogProbs> FV </LogProbs> </TransitionModel>
    Topology        = <Topology> phones phone2idx [-1] entries... </Topology>   (-1: not an HMM,
                      i.e. a state's forward and self-loop pdf classes differ; tuples then have 4 ints)
    AmDiagGmm       = <DIMENSION> int <NUMPDFS> int DiagGmm...
    DiagGmm         = <DiagGMM> <GCONSTS> FV <WEIGHTS> FV <MEANS_INVVARS> FM <INV_VARS> FM </DiagGMM>

The bindings pickle these objects as tuples of their fields, not in Kaldi's format, so the
bytes are written here from those fields, as TransitionModel::Write, HmmTopology::Write and
AmDiagGmm::Write (binary) emit them; reading rebuilds the objects through the same pickle
state, the transition model's derived tables computed as Kaldi's ComputeDerived does. Kaldi's
own tools (gmm-info, ali-to-pdf, gmm-align-compiled) read the file, and so does the hybrid
training path's reader of transition ids (`asr.kaldi.alignments.read_transition_model`).
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path

import _kaldi_hmm_gmm
import kaldi_hmm_gmm as khg
import numpy as np

from asr.kaldi.binary import (
    BINARY_MARK,
    KaldiBinaryReader,
    float_matrix_bytes,
    float_vector_bytes,
    int32_bytes,
    int32_vector_bytes,
    token_bytes,
)
from asr.utils.atomic import atomic_path
from asr.utils.errors import InputError

NO_PDF = -1  # Kaldi's kNoPdf: the final, non-emitting state of a topology entry


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
    out += [token_bytes(f"</{kind}>"), token_bytes("<LogProbs>"), float_vector_bytes(np.asarray(tm.log_probs))]
    out += [token_bytes("</LogProbs>"), token_bytes("</TransitionModel>")]
    return b"".join(out)


def diag_gmm_bytes(gmm: khg.DiagGmm) -> bytes:
    """DiagGmm::Write(binary=true); the gconsts are recomputed first, as Kaldi requires them valid."""
    gmm.compute_gconsts()
    return b"".join(
        [
            token_bytes("<DiagGMM>"),
            token_bytes("<GCONSTS>"),
            float_vector_bytes(np.asarray(gmm.gconsts)),
            token_bytes("<WEIGHTS>"),
            float_vector_bytes(np.asarray(gmm.weights)),
            token_bytes("<MEANS_INVVARS>"),
            float_matrix_bytes(np.asarray(gmm.means_invvars)),
            token_bytes("<INV_VARS>"),
            float_matrix_bytes(np.asarray(gmm.inv_vars)),
            token_bytes("</DiagGMM>"),
        ]
    )


def am_diag_gmm_bytes(am: khg.AmDiagGmm) -> bytes:
    """AmDiagGmm::Write(binary=true)."""
    head = token_bytes("<DIMENSION>") + int32_bytes(am.dim) + token_bytes("<NUMPDFS>") + int32_bytes(am.num_pdfs)
    return head + b"".join(diag_gmm_bytes(am.get_pdf(pdf)) for pdf in range(am.num_pdfs))


def model_bytes(tm: khg.TransitionModel, am: khg.AmDiagGmm) -> bytes:
    return BINARY_MARK + transition_model_bytes(tm) + am_diag_gmm_bytes(am)


def write_model(path: str | os.PathLike, tm: khg.TransitionModel, am: khg.AmDiagGmm) -> None:
    """`final.mdl` (binary), atomically."""
    if am.num_pdfs != tm.num_pdfs:
        raise ValueError(f"the acoustic model has {am.num_pdfs} pdfs, the transition model {tm.num_pdfs}")
    data = model_bytes(tm, am)
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(data)


# --- reading -----------------------------------------------------------------------------------


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


def _state(forward: int, self_loop: int, transitions: list[tuple[int, float]]):
    state = _kaldi_hmm_gmm.HmmState.__new__(_kaldi_hmm_gmm.HmmState)
    state.__setstate__((forward, self_loop, transitions))
    return state


def derived_tables(topo_entries: dict[int, list], tuples: list[tuple[int, int, int, int]], r: KaldiBinaryReader):
    """(state2id, id2state, id2pdf_id, num_pdfs) as TransitionModel::ComputeDerived makes them:
    transition states are the tuples, 1-based; each gets one id per transition out of its HMM
    state, numbered from 1; a self-loop's id maps to the self-loop pdf, the others to the forward pdf."""
    state2id, id2state, id2pdf = [0], [0], [0]
    num_pdfs = 0
    for tstate, (phone, hmm_state, forward_pdf, self_loop_pdf) in enumerate(tuples, 1):
        entry = topo_entries.get(phone)
        if entry is None or not 0 <= hmm_state < len(entry):
            raise r.fail(f"transition state ({phone}, {hmm_state}) outside the topology")
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
    r.expect("<TransitionModel>")
    topo = read_topology(r)
    kind = r.expect("<Triples>", "<Tuples>")
    tuples = []
    for _ in range(r.int32()):
        phone, hmm_state, forward = r.int32(), r.int32(), r.int32()
        tuples.append((phone, hmm_state, forward, r.int32() if kind == "<Tuples>" else forward))
    r.expect(kind.replace("<", "</"))
    r.expect("<LogProbs>")
    log_probs = [float(v) for v in r.vector()]
    r.expect("</LogProbs>")
    r.expect("</TransitionModel>")
    phones, phone2idx, entries = topo.__getstate__()
    by_phone = {phone: entries[phone2idx[phone]] for phone in phones}
    state2id, id2state, id2pdf, num_pdfs = derived_tables(by_phone, tuples, r)
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


def read_diag_gmm(r: KaldiBinaryReader) -> khg.DiagGmm:
    r.expect("<DiagGMM>")
    if r.expect("<GCONSTS>", "<WEIGHTS>") == "<GCONSTS>":
        r.vector()  # recomputed from the parameters
        r.expect("<WEIGHTS>")
    weights = r.vector()
    r.expect("<MEANS_INVVARS>")
    means_invvars = r.matrix()
    r.expect("<INV_VARS>")
    inv_vars = r.matrix()
    r.expect("</DiagGMM>")
    if not (len(weights) == len(inv_vars) and means_invvars.shape == inv_vars.shape) or not len(weights):
        raise r.fail("a GMM with inconsistent sizes")
    if not (np.isfinite(inv_vars).all() and (inv_vars > 0).all() and np.isfinite(means_invvars).all()):
        raise r.fail("a GMM with non-finite or non-positive inverse variances")
    gmm = khg.DiagGmm.__new__(khg.DiagGmm)  # the pickle state is Kaldi's stored fields: no rounding
    gmm.__setstate__(tuple(a.astype(np.float32) for a in (weights, inv_vars, means_invvars)))
    gmm.compute_gconsts()
    return gmm


def read_am_diag_gmm(r: KaldiBinaryReader) -> khg.AmDiagGmm:
    r.expect("<DIMENSION>")
    dim = r.int32()
    r.expect("<NUMPDFS>")
    num_pdfs = r.int32()
    if dim < 1 or num_pdfs < 0:
        raise r.fail(f"dimension {dim}, {num_pdfs} pdfs")
    am = khg.AmDiagGmm()
    for _ in range(num_pdfs):
        gmm = read_diag_gmm(r)
        if gmm.dim != dim:
            raise r.fail(f"a {gmm.dim}-dim GMM in a {dim}-dim model")
        am.add_pdf(gmm)
    return am


def read_model(path: str | os.PathLike) -> tuple[khg.TransitionModel, khg.AmDiagGmm]:
    """(transition model, acoustic model) of a binary `final.mdl`; InputError naming the file if damaged."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: model not found; run the GMM stage (python -m asr.gmm) first")
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
