"""`python -m asr.tune decode=beam_lm`: sweep LM weight and word score on the dev set
(decode=wfst: the hybrid model's acoustic scale, `tune_acoustic_scale`).

The acoustic model runs once over decode.tune_set (the held-out train_dev by default); the
beam search then decodes it for every (lm_weight, word_score) of decode.tune_lm_weights x
decode.tune_word_scores, and each result is scored with the jiwer scorer (the same
normalisation as asr.score). The grid and the best pair (lowest WER; ties go to the
smaller weight, then the smaller score) are written to decode.tuning_file, which the
beam_lm decode then uses: Kaldi's scoring picks its LM weight and insertion penalty the
same way, but on the test set; here the test set stays unseen. A best value at the edge of
its grid (the smallest or largest of two or more) is logged as a warning and listed in the
file's `best_at_grid_edge`, as the lr sweep does: the optimum may lie outside the grid.

With decode.split.count=N the set is tuned in N shares of its utterances (cluster array tasks,
decode.split.index=I each writing every grid point's hypotheses of its share), then merged
(index -1): the merge scores each point over all shares' hypotheses, as one local run does
(asr/decode/shares.py).

The tuning file's stage record (`lm_tuning.record.json` beside it, asr/decode/record.py) names
the options and the inputs (checkpoint, dev set features and references, tokenizer, LM or
graph): a tuning whose record matches is not run again, and the log says why one is.
"""

from __future__ import annotations

import itertools
import json
import logging
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from asr.data.datadir import data_set_dir
from asr.decode.acoustic import ScoredSet
from asr.decode.shares import Split, read_tune_shares, tune_shares_dir, write_tune_share
from asr.decode.record import TUNE_RERUN, TUNE_STAGE, tuned_from, tuning_record_dir
from asr.decode.search import ParallelBeamSearch, as_arrays, beam_options, beam_spec
from asr.decode.loglikes import load_frame_ce_model, load_log_priors
from asr.decode.stage import load_decoding_model
from asr.decode.wfst import ParallelWfstSearch, WfstSpec, set_loglikes
from asr.score.wer import score
from asr.text.tokenizer import Tokenizer, tokenizer_model_path
from asr.utils.atomic import write_text
from asr.utils.device import select_device
from asr.utils.errors import InputError
from asr.utils.record import record_path, why_rerun, write_record
from asr.utils.threads import torch_threads

log = logging.getLogger(__name__)


def share_log_probs(scored: ScoredSet) -> dict[str, np.ndarray]:
    """utt -> (T, V) log-probabilities of the scored utterances (those with finite features)."""
    arrays: dict[str, np.ndarray] = {}
    for batch in scored.batches(f"tune {scored.set_name}"):
        arrays.update(zip(batch.utts, as_arrays(batch.log_probs, batch.out_lens)))
    return arrays


def set_log_probs(cfg, set_name: str, model, device: torch.device) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    """(reference texts, utt -> (T, V) log-probabilities) of one set's transcribed utterances."""
    scored = ScoredSet(cfg, set_name, model, device, wanted=lambda data: data.text)
    share = Split.of(cfg).is_share  # a share may be empty (more shares than utterances): the merge checks
    if not scored.utts and not share:
        raise InputError(f"{data_set_dir(cfg, set_name)}: no utterance with both text and features to tune on")
    arrays = share_log_probs(scored)
    if scored.skipped:
        log.warning(
            "%s: %d utterances with NaN/inf features left out of the tuning: %s",
            set_name,
            len(scored.skipped),
            " ".join(sorted(scored.skipped)[:10]),
        )
    if not arrays and not share:
        raise InputError(f"{data_set_dir(cfg, set_name)}: no utterance with finite features to tune on")
    return {u: scored.data.text[u] for u in arrays}, arrays


Points = list[tuple[dict, dict[str, str]]]  # (grid point, utt -> hypothesis text) each


def best_point(grid: list[dict]) -> dict:
    """Lowest WER; ties go to the smaller values, in the order the point names them."""
    return min(grid, key=lambda g: (g["wer"], *(v for k, v in g.items() if k != "wer")))


def edges_reached(grid: list[dict], best: dict) -> list[str]:
    """The grid's values whose best lies on the grid's edge (its smallest or largest value, of
    two or more): a wider grid may find a better one there."""
    names = [k for k in best if k != "wer"]
    reached = []
    for name in names:
        values = sorted({g[name] for g in grid})
        if len(values) > 1 and best[name] in (values[0], values[-1]):
            reached.append(name)
    return reached


def lm_grid_hyps(cfg, pool: ParallelBeamSearch, tokenizer: Tokenizer, arrays: dict[str, np.ndarray]) -> Points:
    """Every (lm_weight, word_score) of the grid: the set's hypotheses."""
    utts = list(arrays)
    base = beam_options(cfg, use_tuned=False)
    points = []
    for lm_weight, word_score in itertools.product(cfg.decode.tune_lm_weights, cfg.decode.tune_word_scores):
        options = replace(base, lm_weight=float(lm_weight), word_score=float(word_score))
        hyps = pool([arrays[u] for u in utts], options)
        texts = {u: tokenizer.decode(h.tokens) for u, h in zip(utts, hyps)}
        points.append(({"lm_weight": options.lm_weight, "word_score": options.word_score}, texts))
    return points


def lm_weight_hyps(cfg) -> tuple[dict[str, str], Points]:
    """decode=beam_lm: the dev set's log-probabilities computed once, beam-searched at every point."""
    if not cfg.decode.tune_lm_weights or not cfg.decode.tune_word_scores:
        raise InputError("decode.tune_lm_weights and decode.tune_word_scores must each list at least one value")
    tokenizer = Tokenizer(tokenizer_model_path(cfg.tokenizer))
    # The workers are forked before torch runs.
    with ParallelBeamSearch(beam_spec(cfg, tokenizer), cfg.decode.jobs) as pool, torch_threads(cfg.decode.threads):
        device = select_device(cfg.device)
        model, tokenizer = load_decoding_model(cfg, device)
        refs, arrays = set_log_probs(cfg, cfg.decode.tune_set, model, device)
        log.info("tuning on %s: %d utterances", cfg.decode.tune_set, len(arrays))
        return refs, lm_grid_hyps(cfg, pool, tokenizer, arrays)


def acoustic_scale_hyps(cfg) -> tuple[dict[str, str], Points]:
    """decode=wfst: the hybrid model's log-likelihoods of the dev set, computed once, decoded in
    the graph at every scale of decode.tune_acoustic_scales."""
    if not cfg.decode.tune_acoustic_scales:
        raise InputError("decode.tune_acoustic_scales must list at least one value")
    # The workers are forked before torch runs.
    with ParallelWfstSearch(WfstSpec.of(cfg), cfg.decode.jobs) as search, torch_threads(cfg.decode.threads):
        device = select_device(cfg.device)
        model = load_frame_ce_model(cfg, device)
        log_prior = load_log_priors(cfg, model.head.linear.out_features)
        scored = ScoredSet(cfg, cfg.decode.tune_set, model, device, wanted=lambda data: data.text)
        items = set_loglikes(cfg, scored, log_prior)
        refs = {utt: scored.data.text[utt] for utt, _ in items}
        points = []
        for scale in cfg.decode.tune_acoustic_scales:
            texts = {utt: " ".join(w.word for w in words) for utt, words in search(items, float(scale))}
            points.append(({"acoustic_scale": float(scale)}, texts))
        return refs, points


def scored_grid(cfg, refs: dict[str, str], points: Points) -> dict:
    """Each point's WER over the whole set, and the best point."""
    grid = []
    for point, texts in points:
        grid.append({**point, "wer": score(refs, texts).subsets["total"].wer})
        log.info("%s: WER %.2f%%", describe(point), grid[-1]["wer"])
    best = best_point(grid)
    at_edge = edges_reached(grid, best)
    for name in at_edge:
        log.warning(
            "the best %s %g is at the edge of the tuning grid %s; a wider grid may find a better one",
            name,
            best[name],
            sorted({g[name] for g in grid}),
        )
    return {
        "set": cfg.decode.tune_set,
        "utterances": len(refs),
        "grid": grid,
        "best": best,
        "best_at_grid_edge": at_edge,
    }


def describe(point: dict) -> str:
    return ", ".join(f"{name} {value:g}" for name, value in point.items() if name != "wer")


HYPOTHESES = {"beam_lm": lm_weight_hyps, "wfst": acoustic_scale_hyps}


def tune(cfg) -> dict:
    """The tune stage: the grid's best point -> decode.tuning_file (a split run's share: its
    hypotheses -> the share's file); nothing when the tuning's record matches."""
    if cfg.decode.kind not in HYPOTHESES:
        raise InputError(
            f"decode.kind={cfg.decode.kind!r}: tuning is for the LM beam search (decode=beam_lm) "
            "or the hybrid model's acoustic scale (decode=wfst)"
        )
    record_dir, record_name = tuning_record_dir(cfg)
    reason = why_rerun(record_dir, TUNE_STAGE, *tuned_from(cfg), name=record_name)
    if reason is None:
        log.info("tuned already (%s), skipping", record_path(record_dir, record_name))
        return json.loads(Path(cfg.decode.tuning_file).read_text())
    log.info("tuning (%s)", reason)
    split = Split.of(cfg)
    if split.is_merge:
        refs, points = read_tune_shares(cfg)
    else:
        refs, points = HYPOTHESES[cfg.decode.kind](cfg)
    if split.is_share:
        path = write_tune_share(cfg, refs, points)
        log.info("share %s of %s: %d utterances -> %s", split.name, cfg.decode.tune_set, len(refs), path)
        return {"share": str(path), "utterances": len(refs)}
    if not refs:
        raise InputError(f"{cfg.decode.tune_set}: no utterance with text and finite features to tune on")
    result = scored_grid(cfg, refs, points)
    record_path(record_dir, record_name).unlink(missing_ok=True)  # no old record vouches for the new file
    write_text(Path(cfg.decode.tuning_file), json.dumps(result, indent=2) + "\n")
    outputs = {Path(cfg.decode.tuning_file).name: True}
    write_record(record_dir, TUNE_STAGE, TUNE_RERUN, *tuned_from(cfg), outputs, name=record_name)
    if split.is_merge:
        shutil.rmtree(tune_shares_dir(cfg))
    best = result["best"]
    log.info("best on %s: %s (WER %.2f%%) -> %s", result["set"], describe(best), best["wer"], cfg.decode.tuning_file)
    return result
