"""Training graphs and alignment: Kaldi's compile-train-graphs, align-equal-compiled and
gmm-align-compiled, through kaldi_hmm_gmm and kaldifst.

A training graph is the utterance's word sequence composed with the lexicon (optional
silence between words), the context dependency and the HMMs: an FST from transition ids to
words. The flat start aligns it evenly (EqualAlign: a random path of exactly the utterance's
length, each state's frames spread evenly); later passes align with the model (Viterbi with a
beam, retried with `retry_beam` where no path survives), the transition probabilities added to
a copy of the graph with Kaldi's scales (transition 1.0, self-loop 0.1, acoustic 0.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import kaldi_hmm_gmm as khg
import kaldifst
import numpy as np


def graph_compiler(lang, tm: khg.TransitionModel, tree: khg.ContextDependency) -> khg.TrainingGraphCompiler:
    """compile-train-graphs' compiler: L.fst, its disambiguation symbols removed on the way."""
    lexicon = lang.lexicon_fst()
    kaldifst.arcsort(lexicon, sort_type="olabel")
    return khg.TrainingGraphCompiler(
        trans_model=tm,
        ctx_dep=tree,
        lex_fst=lexicon,
        disambig_syms=list(lang.disambig_phones),
        # No transition probabilities in the graphs: `align` adds the model's current ones (as
        # compile-train-graphs, which sets both scales to 0). reorder=False: each state's self-loops
        # before its forward transition, the order the tree statistics (asr/hmm/tree.py) split
        # alignments into phones in; Kaldi's default reorders (both are valid Kaldi alignments).
        opts=khg.TrainingGraphCompilerOptions(transition_scale=0.0, self_loop_scale=0.0, reorder=False),
    )


def equal_alignment(graph: kaldifst.StdVectorFst, num_frames: int, seed: int = 3) -> np.ndarray | None:
    """align-equal-compiled: transition ids of an even path through the graph; None if the
    utterance is shorter than any path (or the graph is empty). The path is drawn at random:
    seed it per utterance, so that optional silences are taken in some utterances and skipped
    in others (one seed for all takes the same choices everywhere, and the silence model may
    get no frames at all)."""
    ok, path = kaldifst.equal_align(ifst=graph, length=num_frames, rand_seed=seed, num_retries=10)
    if not ok:
        return None
    ok, tids, _words, _weight = kaldifst.get_linear_symbol_sequence(path)
    if not ok or len(tids) != num_frames:
        return None
    return np.asarray(tids, dtype=np.int32)


@dataclass
class AlignOptions:
    beam: float = 10.0
    retry_beam: float = 40.0
    acoustic_scale: float = 0.1
    transition_scale: float = 1.0
    self_loop_scale: float = 0.1


@dataclass
class Aligned:
    tids: np.ndarray | None  # None: no path within the retry beam
    log_like: float  # the best path's score per Kaldi (acoustic-scaled), 0 when failed
    retried: bool


def align(
    am: khg.AmDiagGmm, tm: khg.TransitionModel, graph: kaldifst.StdVectorFst, feats: np.ndarray, opts: AlignOptions
) -> Aligned:
    """gmm-align-compiled for one utterance."""
    fst = graph.copy()
    khg.add_transition_probs(
        trans_model=tm, transition_scale=opts.transition_scale, self_loop_scale=opts.self_loop_scale, fst=fst
    )
    decodable = khg.DecodableAmDiagGmmScaled(am=am, tm=tm, feats=feats, scale=opts.acoustic_scale)
    done, _error, retried, like, _frames, tids, _words = khg.align_utterance_wrapper(
        config=khg.AlignConfig(beam=opts.beam, retry_beam=opts.retry_beam, careful=False),
        utt="",
        acoustic_scale=opts.acoustic_scale,
        fst=fst,
        decodable=decodable,
        num_done=0,
        num_error=0,
        num_retried=0,
        tot_like=0.0,
        frame_count=0,
    )
    if not done or len(tids) != len(feats):
        return Aligned(None, 0.0, bool(retried))
    return Aligned(np.asarray(tids, dtype=np.int32), float(like), bool(retried))


def transition_id_phones(tm: khg.TransitionModel) -> np.ndarray:
    """(num_transition_ids + 1,): each transition id's phone (index 0, no transition id: 0)."""
    return np.array([0] + [tm.transition_id_to_phone(t) for t in range(1, tm.num_transition_ids + 1)])


def silence_transition_ids(tm: khg.TransitionModel, silence_phones) -> np.ndarray:
    """(num_transition_ids + 1,) bool: the transition ids of silence phones (weight-silence-post)."""
    return np.isin(transition_id_phones(tm), list(silence_phones))
