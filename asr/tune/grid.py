"""`python -m asr.tune decode=beam_lm`: sweep LM weight and word score on the dev set
(decode=wfst: the hybrid model's acoustic scale, `tune_acoustic_scale`).

The acoustic model runs once over decode.tune_set (the held-out train_dev by default); the
beam search then decodes it for every (lm_weight, word_score) of decode.tune_lm_weights x
decode.tune_word_scores, and each result is scored with the jiwer scorer (the same
normalisation as asr.score). The grid and the best pair (lowest WER; ties go to the
smaller weight, then the smaller score) are written to decode.tuning_file, which the
beam_lm decode then uses: Kaldi's scoring picks its LM weight and insertion penalty the
same way, but on the test set; here the test set stays unseen.
"""

from __future__ import annotations

import itertools
import json
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from asr.data.datadir import data_set_dir
from asr.decode.acoustic import ScoredSet
from asr.decode.search import ParallelBeamSearch, as_arrays, beam_options, beam_spec
from asr.decode.loglikes import load_frame_ce_model, load_log_priors
from asr.decode.stage import load_decoding_model
from asr.decode.wfst import ParallelWfstSearch, WfstSpec, set_loglikes
from asr.score.wer import score
from asr.text.tokenizer import Tokenizer, tokenizer_model_path
from asr.utils.atomic import write_text
from asr.utils.device import select_device
from asr.utils.errors import InputError

log = logging.getLogger(__name__)


def set_log_probs(cfg, set_name: str, model, device: torch.device) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    """(reference texts, utt -> (T, V) log-probabilities) of one set's transcribed utterances."""
    scored = ScoredSet(cfg, set_name, model, device, wanted=lambda data: data.text)
    if not scored.utts:
        raise InputError(f"{data_set_dir(cfg, set_name)}: no utterance with both text and features to tune on")
    arrays: dict[str, np.ndarray] = {}
    for batch in scored.batches(f"tune {set_name}"):
        arrays.update(zip(batch.utts, as_arrays(batch.log_probs, batch.out_lens)))
    if scored.skipped:
        log.warning(
            "%s: %d utterances with NaN/inf features left out of the tuning: %s",
            set_name,
            len(scored.skipped),
            " ".join(sorted(scored.skipped)[:10]),
        )
    if not arrays:
        raise InputError(f"{data_set_dir(cfg, set_name)}: no utterance with finite features to tune on")
    return {u: scored.data.text[u] for u in arrays}, arrays


def best_point(grid: list[dict]) -> dict:
    return min(grid, key=lambda g: (g["wer"], g["lm_weight"], g["word_score"]))


def sweep(
    cfg, pool: ParallelBeamSearch, tokenizer: Tokenizer, refs: dict[str, str], arrays: dict[str, np.ndarray]
) -> list[dict]:
    utts = list(arrays)
    base = beam_options(cfg, use_tuned=False)
    grid = []
    for lm_weight, word_score in itertools.product(cfg.decode.tune_lm_weights, cfg.decode.tune_word_scores):
        options = replace(base, lm_weight=float(lm_weight), word_score=float(word_score))
        hyps = pool([arrays[u] for u in utts], options)
        texts = {u: tokenizer.decode(h.tokens) for u, h in zip(utts, hyps)}
        wer = score(refs, texts).subsets["total"].wer
        grid.append({"lm_weight": options.lm_weight, "word_score": options.word_score, "wer": wer})
        log.info("lm_weight %g, word_score %g: WER %.2f%%", options.lm_weight, options.word_score, wer)
    return grid


def tune_acoustic_scale(cfg) -> dict:
    """decode=wfst: the hybrid model's log-likelihoods of the dev set, computed once, decoded in
    the graph at every scale of decode.tune_acoustic_scales; the best (lowest WER, ties to the
    smaller scale) goes to decode.tuning_file for the decode stage."""
    if not cfg.decode.tune_acoustic_scales:
        raise InputError("decode.tune_acoustic_scales must list at least one value")
    with ParallelWfstSearch(WfstSpec.of(cfg), cfg.decode.jobs) as search:  # forked before torch runs
        torch.set_num_threads(cfg.decode.threads)
        device = select_device(cfg.device)
        model = load_frame_ce_model(cfg, device)
        log_prior = load_log_priors(cfg, model.head.linear.out_features)
        scored = ScoredSet(cfg, cfg.decode.tune_set, model, device, wanted=lambda data: data.text)
        items = set_loglikes(cfg, scored, log_prior)
        refs = {utt: scored.data.text[utt] for utt, _ in items}
        grid = []
        for scale in cfg.decode.tune_acoustic_scales:
            texts = {utt: " ".join(w.word for w in words) for utt, words in search(items, float(scale))}
            grid.append({"acoustic_scale": float(scale), "wer": score(refs, texts).subsets["total"].wer})
            log.info("acoustic scale %g: WER %.2f%%", grid[-1]["acoustic_scale"], grid[-1]["wer"])
    best = min(grid, key=lambda g: (g["wer"], g["acoustic_scale"]))
    result = {"set": cfg.decode.tune_set, "utterances": len(items), "grid": grid, "best": best}
    write_text(Path(cfg.decode.tuning_file), json.dumps(result, indent=2) + "\n")
    log.info(
        "best on %s: acoustic scale %g (WER %.2f%%) -> %s",
        result["set"],
        best["acoustic_scale"],
        best["wer"],
        cfg.decode.tuning_file,
    )
    return result


def tune(cfg) -> dict:
    if cfg.decode.kind == "wfst":
        return tune_acoustic_scale(cfg)
    if cfg.decode.kind != "beam_lm":
        raise InputError(
            f"decode.kind={cfg.decode.kind!r}: tuning is for the LM beam search (decode=beam_lm) "
            "or the hybrid model's acoustic scale (decode=wfst)"
        )
    if not cfg.decode.tune_lm_weights or not cfg.decode.tune_word_scores:
        raise InputError("decode.tune_lm_weights and decode.tune_word_scores must each list at least one value")
    tokenizer = Tokenizer(tokenizer_model_path(cfg.tokenizer))
    with ParallelBeamSearch(beam_spec(cfg, tokenizer), cfg.decode.jobs) as pool:
        torch.set_num_threads(cfg.decode.threads)
        device = select_device(cfg.device)
        model, tokenizer = load_decoding_model(cfg, device)
        refs, arrays = set_log_probs(cfg, cfg.decode.tune_set, model, device)
        log.info("tuning on %s: %d utterances", cfg.decode.tune_set, len(arrays))
        grid = sweep(cfg, pool, tokenizer, refs, arrays)
    result = {"set": cfg.decode.tune_set, "utterances": len(arrays), "grid": grid, "best": best_point(grid)}
    write_text(Path(cfg.decode.tuning_file), json.dumps(result, indent=2) + "\n")
    best = result["best"]
    log.info(
        "best on %s: lm_weight %g, word_score %g (WER %.2f%%) -> %s",
        cfg.decode.tune_set,
        best["lm_weight"],
        best["word_score"],
        best["wer"],
        cfg.decode.tuning_file,
    )
    return result
