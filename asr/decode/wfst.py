"""Hybrid decoding with a WFST: `decode.kind=wfst`, the paper's decoder.

    python -m asr.decode experiment=hybrid decode=wfst decode.graph=exp/tri1/graph \\
        decode.hmm_model=exp/tri1/final.mdl

A frame_ce (hybrid) model's scaled log-likelihoods (log posterior - prior_scale x log prior,
as `decode.kind=loglikes` exports them for Kaldi) are searched, times decode.acoustic_scale, in
`<decode.graph>/HCLG.fst` (mkgraph of the alignment model: its tree and transition model, the
lexicon and the n-gram LM) by kaldi-hmm-gmm's lattice decoder, over decode.jobs forked
processes. The best path's words and their times (its phones matched to the lexicon,
asr/lang/search.py GraphDecoder) go to `hyp.txt` and `hyp.ctm` as the CTC decoders' do, so
scoring is the same.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from asr.decode.acoustic import ScoredSet
from asr.decode.loglikes import load_frame_ce_model, load_log_priors, scaled_loglikes, upsample
from asr.decode.output import TimedWord, ctm_words, evaluation_sets
from asr.decode.shares import write_decoded
from asr.kaldi.model import read_model
from asr.lang.langdir import Lang
from asr.lang.search import GraphDecoder, SearchOptions
from asr.utils.device import select_device
from asr.utils.errors import InputError
from asr.utils.stop import default_signals
from asr.utils.threads import torch_threads

log = logging.getLogger(__name__)

_DECODER: GraphDecoder | None = None  # the worker's graph, read once per process


@dataclass(frozen=True)
class WfstSpec:
    graph: str
    hmm_model: str
    lang: str
    options: SearchOptions

    @classmethod
    def of(cls, cfg) -> "WfstSpec":
        d = cfg.decode
        if not d.graph or not d.hmm_model:
            raise InputError(
                "decode.graph and decode.hmm_model: set them to the alignment model's graph dir and final.mdl "
                "(experiment=hybrid sets exp/tri1/graph and exp/tri1/final.mdl)"
            )
        options = SearchOptions(tuned_acoustic_scale(cfg), d.wfst_beam, d.max_active, d.lattice_beam)
        return cls(str(d.graph), str(d.hmm_model), str(cfg.lang.dir), options)

    def decoder(self) -> GraphDecoder:
        trans_model, _ = read_model(self.hmm_model)
        return GraphDecoder(self.graph, trans_model, Lang.load(self.lang), self.options)


def tuned_acoustic_scale(cfg) -> float:
    """decode.acoustic_scale, or the dev set's best (python -m asr.tune decode=wfst) when
    decode.use_tuned and the tuning file holds one."""
    path = Path(cfg.decode.tuning_file)
    if cfg.decode.use_tuned and path.is_file():
        best = json.loads(path.read_text()).get("best", {})
        if "acoustic_scale" in best:
            log.info("acoustic scale %g: the best on %s (%s)", best["acoustic_scale"], cfg.decode.tune_set, path)
            return float(best["acoustic_scale"])
    return float(cfg.decode.acoustic_scale)


def _init_worker(spec: WfstSpec) -> None:
    global _DECODER
    _DECODER = spec.decoder()


def _decode_in_worker(task: tuple[str, np.ndarray, float | None]) -> tuple[str, list[TimedWord]]:
    utt, loglikes, acoustic_scale = task
    return utt, [TimedWord(w.word, w.start, w.end, 1.0) for w in _DECODER(loglikes, acoustic_scale)]


class ParallelWfstSearch:
    """WFST search of many utterances over `jobs` processes (in-process when jobs <= 1), forked
    before torch runs, after the graph is read."""

    def __init__(self, spec: WfstSpec, jobs: int):
        # The graph is read here, so that a missing or damaged file is this process' clear error
        # (a pool initializer that fails is restarted forever); the forked workers share it.
        _init_worker(spec)
        self.pool = multiprocessing.get_context("fork").Pool(jobs, initializer=default_signals) if jobs > 1 else None

    def __call__(
        self, items: list[tuple[str, np.ndarray]], acoustic_scale: float | None = None
    ) -> list[tuple[str, list[TimedWord]]]:
        """Each (utt, log-likelihoods) decoded at `acoustic_scale` (None: the spec's)."""
        tasks = [(utt, loglikes, acoustic_scale) for utt, loglikes in items]
        if self.pool is None:
            return [_decode_in_worker(task) for task in tasks]
        return self.pool.map(_decode_in_worker, tasks)

    def __enter__(self) -> "ParallelWfstSearch":
        return self

    def __exit__(self, *exc) -> None:
        if self.pool is not None:
            self.pool.terminate() if exc[0] is not None else self.pool.close()
            self.pool.join()


def set_loglikes(cfg, scored: ScoredSet, log_prior: torch.Tensor) -> list[tuple[str, np.ndarray]]:
    """(utt, frames x pdfs scaled log-likelihoods at 10 ms) of every utterance of the set."""
    log_prior = log_prior.to(scored.device)
    items = []
    for batch in scored.batches(f"wfst {scored.set_name}"):
        for b, utt in enumerate(batch.utts):
            loglikes = scaled_loglikes(batch.log_probs[b, : int(batch.out_lens[b])], log_prior, cfg.decode.prior_scale)
            loglikes = upsample(loglikes, scored.model.subsample, int(batch.feat_lens[b]))
            items.append((utt, loglikes.float().cpu().numpy()))
    return items


def write_set(cfg, set_name: str, scored: ScoredSet, decoded: list[tuple[str, list[TimedWord]]]) -> Path:
    hyps, ctm = {}, []
    for utt, words in decoded:
        hyps[utt] = " ".join(w.word for w in words)
        ctm.extend(ctm_words(scored.data, utt, words, cfg.decode.frame_shift_ms / 1000.0))
    out_dir = write_decoded(cfg, set_name, hyps, ctm, scored.skipped)
    log.info(
        "%s: %d hypotheses, %d words -> %s",
        set_name,
        len(hyps),
        len(ctm),
        out_dir,
    )
    return out_dir


def decode_wfst(cfg, sets: list[str] | None = None) -> list[Path]:
    """The decode stage for decode.kind=wfst (`sets`, else decode.sets); returns the output directories."""
    # The workers are forked before torch runs.
    with ParallelWfstSearch(WfstSpec.of(cfg), cfg.decode.jobs) as search, torch_threads(cfg.decode.threads):
        device = select_device(cfg.device)
        model = load_frame_ce_model(cfg, device)
        log_prior = load_log_priors(cfg, model.head.linear.out_features)
        out_dirs = []
        for name in sets or evaluation_sets(cfg):
            scored = ScoredSet(cfg, name, model, device)
            out_dirs.append(write_set(cfg, name, scored, search(set_loglikes(cfg, scored, log_prior))))
        return out_dirs
