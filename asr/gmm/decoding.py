"""Decoding with a GMM-HMM system, as Kaldi's utils/mkgraph.sh then steps/decode.sh:

    python -m asr.gmm.decode gmm=mono        # or gmm=tri; decode.sets as for the other decoders

The graph `<gmm.dir>/graph/HCLG.fst` (the lang dir's lexicon, the model's tree and transition
model, the recipe's `<lm.decode_order>`-gram ARPA LM; asr/lang/graph.py) is built once and kept
while its record (`graph.record.json`: the LM, the model, the lang dir) matches. Every utterance of a set
is scored by the model's GMMs on its features (the training front end: asr/gmm/frontend.py),
searched with gmm.decode_acoustic_scale, its words and times written to
`<gmm.dir>/decode_<set>/hyp.{txt,ctm}` over gmm.nj forked processes. Score them with
`python -m asr.score exp_dir=<gmm.dir>`. A set is decoded again unless its stage record
(`decode_<set>/decode.record.json`) names the same search options and unchanged inputs: the
graph's record, the model, the set's feature set and the data dir's tables the CTM needs.
"""

from __future__ import annotations

import logging
import multiprocessing
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from asr.data.ctm import CtmWord, write_ctm
from asr.data.datadir import read_data_dir
from asr.decode.output import TimedWord, ctm_words, evaluation_sets, write_hyp_text
from asr.features.featureset import feature_set_dir, feature_set_input
from asr.gmm.frontend import GmmFeatures, with_deltas
from asr.gmm.stats import ModelArrays
from asr.kaldi.model import read_model
from asr.kaldi.tree import load_context_dependency
from asr.lang.graph import mkgraph
from asr.lang.langdir import Lang
from asr.lang.search import GraphDecoder, SearchOptions
from asr.utils.record import outputs_of, why_rerun, write_record
from asr.utils.stop import default_signals

log = logging.getLogger("asr.gmm")

GRAPH_RERUN = RERUN = "python -m asr.gmm.decode"
STAGE = "decode"
FRONT_END = ("front_end", "num_ceps", "cepstral_lifter", "cmvn", "delta_order", "decode_acoustic_scale")
CTM_TABLES = ("utt2spk", "segments", "reco2file_and_channel")  # what a set's words and times are read with
FRAME_CHUNK = 512  # frames scored at once: (chunk x Gaussians) float64 stays in tens of MB


def pdf_log_likelihoods(model: ModelArrays, feats: np.ndarray) -> np.ndarray:
    """(T, pdfs) float32: each pdf's log-likelihood, the log-sum-exp of its Gaussians'
    (Kaldi's DiagGmm::LogLikelihood; the weights are in the gconsts)."""
    starts = model.offsets[:-1]
    sizes = np.diff(model.offsets)
    out = np.empty((len(feats), len(starts)), np.float32)
    for t0 in range(0, len(feats), FRAME_CHUNK):
        x = feats[t0 : t0 + FRAME_CHUNK].astype(np.float64)
        ll = model.gconsts[None, :] + x @ model.means_invvars.T - 0.5 * (x * x) @ model.inv_vars.T
        peak = np.maximum.reduceat(ll, starts, axis=1)
        total = np.add.reduceat(np.exp(ll - np.repeat(peak, sizes, axis=1)), starts, axis=1)
        out[t0 : t0 + FRAME_CHUNK] = peak + np.log(total)
    return out


def ensure_graph(cfg, model_dir: Path) -> Path:
    """`<model_dir>/graph`, built unless its record says it is of this model and LM already."""
    graph_dir = model_dir / "graph"
    arpa = Path(cfg.lm.dir) / f"{cfg.lm.decode_order}gram.arpa"
    lang_dir = Path(cfg.gmm.lang_dir)
    inputs = [arpa, model_dir / "final.mdl", model_dir / "tree", lang_dir / "L_disambig.fst", lang_dir / "words.txt"]
    reason = why_rerun(graph_dir, "graph", {}, inputs)
    if reason is None:
        log.info("%s: built from this model and LM already; keeping it", graph_dir)
        return graph_dir
    log.info("%s: building (%s)", graph_dir, reason)

    def read_tree_and_model(directory: Path):
        return load_context_dependency(directory / "tree"), read_model(directory / "final.mdl")[0]

    mkgraph(lang_dir, model_dir, arpa, graph_dir, read_tree_and_model)
    # FSTs by size only: HCLG reaches gigabytes, and each decoding worker verifies it
    write_record(graph_dir, "graph", GRAPH_RERUN, {}, inputs, outputs_of(graph_dir, sizes_only=(".ark", ".fst")))
    return graph_dir


@dataclass(frozen=True)
class GmmDecodeSpec:
    model_dir: str
    lang_dir: str
    options: SearchOptions


_WORKER: tuple[GraphDecoder, ModelArrays] | None = None


def _init_worker(spec: GmmDecodeSpec) -> None:
    global _WORKER
    trans_model, am = read_model(Path(spec.model_dir) / "final.mdl")
    decoder = GraphDecoder(Path(spec.model_dir) / "graph", trans_model, Lang.load(spec.lang_dir), spec.options)
    _WORKER = decoder, ModelArrays.of(am)


def _decode_in_worker(task: tuple[str, np.ndarray]) -> tuple[str, list[TimedWord]]:
    utt, feats = task
    decoder, model = _WORKER
    return utt, [TimedWord(w.word, w.start, w.end, 1.0) for w in decoder(pdf_log_likelihoods(model, feats))]


def set_made_from(cfg, set_name: str, model_dir: Path) -> tuple[dict, list[Path]]:
    """What a set's decoding record names (see the module's docstring)."""
    options = {**{k: cfg.gmm[k] for k in FRONT_END}, **{k: cfg.decode[k] for k in ("wfst_beam", "max_active")}}
    options["frame_shift_ms"] = cfg.decode.frame_shift_ms
    data_dir = Path(cfg.data.data_dir) / set_name
    inputs = [model_dir / "graph" / "graph.record.json", model_dir / "final.mdl"]
    inputs += [data_dir / name for name in CTM_TABLES] + [feature_set_input(feature_set_dir(cfg, set_name))]
    return options, [p for p in inputs if p.is_file()]


def decode_set(cfg, set_name: str, pool, out_root: Path) -> Path:
    out_dir = out_root / f"decode_{set_name}"
    made = set_made_from(cfg, set_name, out_root)
    reason = why_rerun(out_dir, STAGE, *made)
    if reason is None:
        log.info("%s: decoded already with this model and these options (%s), skipping", set_name, out_dir)
        return out_dir
    log.info("%s: decoding (%s)", set_name, reason)
    data = read_data_dir(Path(cfg.data.data_dir) / set_name)
    g = cfg.gmm
    feats = GmmFeatures(
        feature_set_dir(cfg, set_name), data.utt2spk, g.front_end, g.num_ceps, g.cepstral_lifter, g.cmvn
    )
    tasks = ((utt, with_deltas(feats.statics(utt), g.delta_order)) for utt in feats.reader.utts())
    hyps: dict[str, str] = {}
    ctm: list[CtmWord] = []
    for utt, words in pool.imap(_decode_in_worker, tasks, chunksize=8):
        hyps[utt] = " ".join(w.word for w in words)
        ctm.extend(ctm_words(data, utt, words, cfg.decode.frame_shift_ms / 1000.0))
    write_hyp_text(out_dir / "hyp.txt", hyps)
    write_ctm(out_dir / "hyp.ctm", ctm)
    write_record(out_dir, STAGE, RERUN, *made, {"hyp.txt": True, "hyp.ctm": True})
    log.info("%s: %d hypotheses, %d words -> %s", set_name, len(hyps), len(ctm), out_dir)
    return out_dir


def decode_gmm(cfg) -> list[Path]:
    """The GMM decode stage; returns the output directories."""
    model_dir = Path(cfg.gmm.dir)
    ensure_graph(cfg, model_dir)
    options = SearchOptions(cfg.gmm.decode_acoustic_scale, cfg.decode.wfst_beam, cfg.decode.max_active)
    spec = GmmDecodeSpec(str(model_dir), str(cfg.gmm.lang_dir), options)
    _init_worker(spec)  # here: a failing pool initializer is restarted forever; the forked workers share it
    with multiprocessing.get_context("fork").Pool(cfg.gmm.nj, initializer=default_signals) as pool:
        return [decode_set(cfg, name, pool, model_dir) for name in evaluation_sets(cfg)]
