"""WFST search over a decoding graph (HCLG, asr/lang/graph.py) with Kaldi's lattice-faster
decoder (kaldi_hmm_gmm), as latgen-faster-mapped does for a hybrid model: the acoustic scores
come as a matrix of log-likelihoods, one column per transition id.

kaldi_hmm_gmm's DecodableCtc gives the decoder column index-1 for the graph's input label
`index` (labels are one-based: 0 is epsilon), so column i holds transition id i+1. A model
that scores pdfs (a GMM, the hybrid BLSTM's posteriors over priors) is expanded to that layout
with `pdf_to_transition_loglikes`: every transition id gets its pdf's column.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import kaldi_hmm_gmm
import kaldifst  # after kaldi_hmm_gmm: with kaldifst 1.8 the other order deadlocks
import numpy as np

from asr.lang.langdir import Lang
from asr.lang.word_align import phone_segments, word_spans
from asr.utils.errors import InputError
from asr.utils.record import verify


def transition_id_pdfs(trans_model: kaldi_hmm_gmm.TransitionModel) -> np.ndarray:
    """pdf of each transition id 1..N, as an array indexed by transition id - 1.

    Kaldi's TransitionIdToPdfArray() is indexed by transition id itself, entry 0 unused.
    """
    pdfs = np.asarray(trans_model.transition_id_to_pdf_array(), dtype=np.int64)
    return pdfs[1 : trans_model.num_transition_ids + 1]


def pdf_to_transition_loglikes(loglikes_by_pdf: np.ndarray, trans_model: kaldi_hmm_gmm.TransitionModel) -> np.ndarray:
    """(frames x pdfs) -> (frames x transition ids): column i is transition id i+1's pdf."""
    if loglikes_by_pdf.ndim != 2 or loglikes_by_pdf.shape[1] != trans_model.num_pdfs:
        raise InputError(
            f"log-likelihoods of shape {loglikes_by_pdf.shape} do not match the model's {trans_model.num_pdfs} pdfs"
        )
    return np.ascontiguousarray(loglikes_by_pdf[:, transition_id_pdfs(trans_model)], dtype=np.float32)


def decode_wfst(
    hclg: kaldifst.StdVectorFst,
    loglikes_by_tid: np.ndarray,
    trans_model: kaldi_hmm_gmm.TransitionModel,
    beam: float = 13.0,
    max_active: int = 7000,
    lattice_beam: float = 6.0,
) -> tuple[list[int], list[int]]:
    """Best path of one utterance: (word ids, transition id per frame).

    loglikes_by_tid is frames x num_transition_ids, already scaled by the acoustic scale.
    A search that reaches no final state gives the best partial path (Kaldi's
    --allow-partial=true); ([], []) when nothing survived the beam.
    """
    if loglikes_by_tid.ndim != 2 or loglikes_by_tid.shape[1] != trans_model.num_transition_ids:
        raise InputError(
            f"log-likelihoods of shape {loglikes_by_tid.shape} do not match the model's "
            f"{trans_model.num_transition_ids} transition ids"
        )
    config = kaldi_hmm_gmm.LatticeFasterDecoderConfig(max_active=max_active, beam=beam, lattice_beam=lattice_beam)
    decoder = kaldi_hmm_gmm.LatticeFasterDecoder(hclg, config)
    decodable = kaldi_hmm_gmm.DecodableCtc(np.ascontiguousarray(loglikes_by_tid, dtype=np.float32))
    found, tids, words, _ = kaldi_hmm_gmm.decode_utterance_lattice_faster(
        decoder=decoder, decodable=decodable, trans_model=trans_model, utt="utterance", allow_partial=True
    )
    return (list(words), list(tids)) if found else ([], [])


@dataclass(frozen=True)
class SearchOptions:
    """latgen-faster-mapped's options (swbd s5c's beams); the acoustic scale multiplies the
    log-likelihoods before the search."""

    acoustic_scale: float = 0.1
    beam: float = 13.0
    max_active: int = 7000
    lattice_beam: float = 6.0


@dataclass(frozen=True)
class DecodedWord:
    word: str
    start: int  # first frame
    end: int  # one past the last frame


class GraphDecoder:
    """Words with their frames from an utterance's per-pdf log-likelihoods: the search over a
    graph dir's `HCLG.fst` (as mkgraph writes it), then the best path's phones matched to the
    lang dir's lexicon (asr/lang/word_align.py)."""

    def __init__(self, graph_dir, trans_model: kaldi_hmm_gmm.TransitionModel, lang: Lang, options: SearchOptions):
        path = Path(graph_dir) / "HCLG.fst"
        if not path.is_file():
            raise InputError(f"{path}: no decoding graph; build it with the recipe's mkgraph stage")
        verify(path, "decoding graph")
        self.hclg = kaldifst.StdVectorFst.read(str(path))
        self.trans_model, self.lang, self.options = trans_model, lang, options
        self.word_names, self.prons = lang.word_names, lang.pronunciations()

    def __call__(self, loglikes_by_pdf: np.ndarray, acoustic_scale: float | None = None) -> list[DecodedWord]:
        """The words of one utterance; `acoustic_scale` replaces the options' (a tuning sweep)."""
        return self.decode(loglikes_by_pdf, acoustic_scale)[0]

    def decode(
        self, loglikes_by_pdf: np.ndarray, acoustic_scale: float | None = None
    ) -> tuple[list[DecodedWord], list[int]]:
        """The words of one utterance and its best path's transition ids (empty: no path)."""
        scale = self.options.acoustic_scale if acoustic_scale is None else acoustic_scale
        scaled = pdf_to_transition_loglikes(loglikes_by_pdf, self.trans_model) * scale
        o = self.options
        words, tids = decode_wfst(self.hclg, scaled, self.trans_model, o.beam, o.max_active, o.lattice_beam)
        if not tids:
            return [], []
        partial = not self.trans_model.is_final(tids[-1])  # the search reached no final state
        segments = phone_segments(tids, self.trans_model, partial)
        spans = word_spans(words, segments, self.prons, self.lang.optional_silence, partial)
        return [DecodedWord(self.word_names[s.word], s.start, s.end) for s in spans], tids
