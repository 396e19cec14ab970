"""Decoding with a GMM-HMM system, as Kaldi's utils/mkgraph.sh then steps/decode.sh:

    python -m asr.gmm.decode gmm=mono        # or gmm=tri; decode.sets as for the other decoders

The graph `<gmm.dir>/graph/HCLG.fst` (the lang dir's lexicon, the model's tree and transition
model, the recipe's `<lm.decode_order>`-gram ARPA LM; asr/lang/graph.py) is built once and kept
while its record (`graph.record.json`: the LM, the model, the lang dir) matches. Every utterance of a set
is scored by the model's GMMs on its features (the training front end: asr/gmm/frontend.py),
searched with gmm.decode_acoustic_scale, its words and times written to
`<gmm.dir>/decode_<set>/hyp.{txt,ctm}` over gmm.nj forked processes (gmm.submit=slurm: gmm.nj
jobs of a SLURM array a pass, asr/gmm/jobs.py). Score them with
`python -m asr.score exp_dir=<gmm.dir>`. A set is decoded again unless its stage record
(`decode_<set>/decode.record.json`) names the same search options and unchanged inputs: the
graph's record, the model, the set's feature set and the data dir's tables the CTM needs.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from asr.data.ctm import CtmWord, write_ctm
from asr.data.datadir import read_data_dir
from asr.decode.output import TimedWord, ctm_words, evaluation_sets, write_hyp_text
from asr.features.featureset import feature_set_dir, feature_set_input
from asr.gmm.adaptation import SpeakerAccs, estimate_transforms, speaker_accs
from asr.gmm.frontend import GmmFeatures, Projection
from asr.gmm.graphs import silence_transition_ids
from asr.gmm.jobs import make_jobs
from asr.gmm.stats import FrameWeights, ModelArrays, Stats, accumulate
from asr.kaldi.matrix import write_transform_ark
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
MODEL_FILES = ("final.mdl", "final.alimdl", "final.mat")  # what a set's decoding reads of the system
CTM_TABLES = ("utt2spk", "segments", "reco2file_and_channel")  # what a set's words and times are read with
ALIGNMENT_MODEL = "final.alimdl"  # a SAT system's speaker-independent model: its first pass
SILENCE_WEIGHT = 0.01  # decode_fmllr.sh's --silence-weight for the transforms' statistics
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


_WORKER: tuple[GraphDecoder, dict[str, ModelArrays]] | None = None


def _init_worker(spec: GmmDecodeSpec) -> None:
    global _WORKER
    model_dir = Path(spec.model_dir)
    trans_model, am = read_model(model_dir / "final.mdl")
    models = {"final": ModelArrays.of(am)}
    if (model_dir / ALIGNMENT_MODEL).is_file():
        models["si"] = ModelArrays.of(read_model(model_dir / ALIGNMENT_MODEL)[1])
    decoder = GraphDecoder(model_dir / "graph", trans_model, Lang.load(spec.lang_dir), spec.options)
    _WORKER = decoder, models


def _decode_in_worker(task: tuple[str, np.ndarray, str]) -> tuple[str, list[TimedWord], np.ndarray]:
    utt, feats, model = task
    decoder, models = _WORKER
    words, tids = decoder.decode(pdf_log_likelihoods(models[model], feats))
    return utt, [TimedWord(w.word, w.start, w.end, 1.0) for w in words], np.asarray(tids, np.int64)


def decode_share(tasks: list[tuple[str, np.ndarray, str]], spec: GmmDecodeSpec) -> list:
    """One job's utterances (gmm.submit=slurm: an array task, which loads the model itself)."""
    if _WORKER is None:
        _init_worker(spec)
    return [_decode_in_worker(task) for task in tasks]


def local_decoding(pool) -> Callable:
    """Decode tasks in the forked pool, which shares the model loaded here."""
    return lambda tasks: pool.imap(_decode_in_worker, tasks, chunksize=8)


def job_decoding(jobs, spec: GmmDecodeSpec, nj: int) -> Callable:
    """Decode tasks as `nj` jobs of consecutive utterances (asr/gmm/jobs.py)."""

    def run(tasks):
        tasks = list(tasks)
        size = max(1, -(-len(tasks) // max(nj, 1)))  # ceil; an empty set: no share
        shares = [tasks[i : i + size] for i in range(0, len(tasks), size)]
        return itertools.chain.from_iterable(jobs.map(decode_share, shares, spec))

    return run


def set_made_from(cfg, set_name: str, model_dir: Path) -> tuple[dict, list[Path]]:
    """What a set's decoding record names (see the module's docstring)."""
    options = {**{k: cfg.gmm[k] for k in FRONT_END}, **{k: cfg.decode[k] for k in ("wfst_beam", "max_active")}}
    options["frame_shift_ms"] = cfg.decode.frame_shift_ms
    data_dir = Path(cfg.data.data_dir) / set_name
    inputs = [model_dir / "graph" / "graph.record.json", *(model_dir / name for name in MODEL_FILES)]
    inputs += [data_dir / name for name in CTM_TABLES] + [feature_set_input(feature_set_dir(cfg, set_name))]
    return options, [p for p in inputs if p.is_file()]


def decode_set(cfg, set_name: str, run: Callable, out_root: Path) -> Path:
    out_dir = out_root / f"decode_{set_name}"
    made = set_made_from(cfg, set_name, out_root)
    reason = why_rerun(out_dir, STAGE, *made)
    if reason is None:
        log.info("%s: decoded already with this model and these options (%s), skipping", set_name, out_dir)
        return out_dir
    log.info("%s: decoding (%s)", set_name, reason)
    data = read_data_dir(Path(cfg.data.data_dir) / set_name)
    g = cfg.gmm
    statics = GmmFeatures(
        feature_set_dir(cfg, set_name), data.utt2spk, g.front_end, g.num_ceps, g.cepstral_lifter, g.cmvn
    )
    projection = Projection.load(out_root, g.delta_order)
    feats = {utt: projection.speaker_independent(statics.statics(utt)) for utt in statics.reader.utts()}
    if (out_root / ALIGNMENT_MODEL).is_file():  # SAT: the speaker-independent pass, then fMLLR per speaker
        first = dict(decode_all(run, feats, "si"))
        transforms = first_pass_transforms(out_root, feats, first, data.utt2spk, cfg.gmm.lang_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        write_transform_ark(out_dir / "trans.ark", transforms)
        projection = replace(projection, speaker_transforms=transforms, utt2spk=dict(data.utt2spk))
        feats = {utt: projection.adapt(utt, x) for utt, x in feats.items()}
    outputs = dict(decode_all(run, feats, "final"))
    hyps: dict[str, str] = {}
    ctm: list[CtmWord] = []
    for utt, (words, _) in outputs.items():
        hyps[utt] = " ".join(w.word for w in words)
        ctm.extend(ctm_words(data, utt, words, cfg.decode.frame_shift_ms / 1000.0))
    write_hyp_text(out_dir / "hyp.txt", hyps)
    write_ctm(out_dir / "hyp.ctm", ctm)
    written = {"hyp.txt": True, "hyp.ctm": True, **({"trans.ark": True} if (out_dir / "trans.ark").is_file() else {})}
    write_record(out_dir, STAGE, RERUN, *made, written)
    log.info("%s: %d hypotheses, %d words -> %s", set_name, len(hyps), len(ctm), out_dir)
    return out_dir


def decode_all(run: Callable, feats: dict[str, np.ndarray], model: str):
    """(utt, (words, transition ids)) of every utterance, decoded with `model` (final | si) by
    `run` (local_decoding or job_decoding)."""
    tasks = ((utt, x, model) for utt, x in feats.items())
    for utt, words, tids in run(tasks):
        yield utt, (words, tids)


def first_pass_transforms(model_dir: Path, feats: dict, first: dict, utt2spk: dict, lang_dir) -> dict:
    """decode_fmllr.sh's fMLLR: each speaker's transform under the final model from the first
    pass's best paths, silence frames weighted SILENCE_WEIGHT (speakers with too few frames
    keep the identity)."""
    tm, am = read_model(model_dir / "final.mdl")
    model = ModelArrays.of(am)
    id2pdf = np.asarray(tm.id2pdf_id, dtype=np.int64)
    silence = silence_transition_ids(tm, Lang.load(lang_dir).silence_phones)
    speakers: dict[str, SpeakerAccs] = {}
    unused = Stats.zeros(model.num_gauss, am.dim, tm.num_transition_ids)  # only the frames' weights are wanted
    for utt, (_, tids) in first.items():
        x = feats[utt]
        if len(tids) != len(x):  # no path found: nothing to adapt with
            continue
        weights = FrameWeights.empty(len(x), x.shape[1])
        accumulate(model, unused, x, id2pdf[tids], tids, None, weights)
        frame_weight = np.where(silence[tids], SILENCE_WEIGHT, 1.0)
        acc = speaker_accs(weights, x, frame_weight)
        speaker = utt2spk.get(utt, utt)
        if speaker in speakers:
            speakers[speaker].add(acc)
        else:
            speakers[speaker] = acc
    estimated = estimate_transforms(speakers, {}, am.dim)
    log.info(
        "fMLLR of %d speakers from the speaker-independent pass: %d estimated, auxiliary function +%.3f per frame",
        len(speakers),
        estimated.updated,
        estimated.aux_gain_per_frame,
    )
    return estimated.transforms


def decode_gmm(cfg) -> list[Path]:
    """The GMM decode stage; returns the output directories."""
    model_dir = Path(cfg.gmm.dir)
    ensure_graph(cfg, model_dir)
    options = SearchOptions(cfg.gmm.decode_acoustic_scale, cfg.decode.wfst_beam, cfg.decode.max_active)
    spec = GmmDecodeSpec(str(model_dir), str(cfg.gmm.lang_dir), options)
    if cfg.gmm.submit == "slurm":
        with make_jobs(cfg.gmm, model_dir) as jobs:
            run = job_decoding(jobs, spec, cfg.gmm.nj)
            return [decode_set(cfg, name, run, model_dir) for name in evaluation_sets(cfg)]
    _init_worker(spec)  # here: a failing pool initializer is restarted forever; the forked workers share it
    with multiprocessing.get_context("fork").Pool(cfg.gmm.nj, initializer=default_signals) as pool:
        return [decode_set(cfg, name, local_decoding(pool), model_dir) for name in evaluation_sets(cfg)]
