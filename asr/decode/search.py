"""The search of `decode.kind`: greedy, or beam search with the word LM in worker processes.

For `beam_lm` the decoder of each worker process is built from a picklable `BeamSpec`
(lexicon, tokenizer pieces, LM path). Workers are forked before the acoustic model runs,
so they start at once and never touch torch; with decode.jobs <= 1 the search runs in the
calling process. The LM weight and word score come from the dev-set sweep
(`python -m asr.tune`, file decode.tuning_file) when decode.use_tuned is set and the
file exists, else from decode.lm_weight / decode.word_score; the choice is logged.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from asr.decode.beam import BeamOptions, BeamSearchDecoder
from asr.decode.greedy import ctc_greedy
from asr.decode.hypothesis import Hypothesis
from asr.decode.lexicon import Lexicon, build_lexicon
from asr.lm.build import WORDS, binary_path
from asr.lm.corpus import read_vocabulary
from asr.text.tokenizer import BLANK_ID, Tokenizer
from asr.utils.errors import InputError
from asr.utils.stop import default_signals
from asr.utils.record import verify

log = logging.getLogger(__name__)

Search = Callable[[torch.Tensor, torch.Tensor], list[Hypothesis]]


@dataclass(frozen=True)
class BeamSpec:
    """Everything a worker needs to build its decoder (picklable)."""

    lexicon: Lexicon
    pieces: tuple[str, ...]
    lm_path: str | None


def lm_path(cfg) -> str | None:
    """decode.lm: auto -> <lm.dir>/<lm.decode_order>gram.bin, none -> no LM, else a path."""
    choice = str(cfg.decode.lm)
    if choice == "none":
        return None
    path = binary_path(cfg.lm.dir, cfg.lm.decode_order) if choice == "auto" else Path(choice)
    if not path.is_file():
        raise InputError(f"{path}: language model not found; run the LM stage (`python -m asr.lm`) or set decode.lm")
    verify(path, "KenLM binary")
    return str(path)


def vocabulary_path(cfg) -> Path:
    """decode.lexicon_words: auto -> the LM's vocabulary <lm.dir>/words.txt, else a path."""
    choice = str(cfg.decode.lexicon_words)
    return Path(cfg.lm.dir) / WORDS if choice == "auto" else Path(choice)


def beam_spec(cfg, tokenizer: Tokenizer) -> BeamSpec:
    lexicon = build_lexicon(read_vocabulary(vocabulary_path(cfg)), tokenizer)
    pieces = tuple(tokenizer.piece(i) for i in range(tokenizer.vocab_size))
    spec = BeamSpec(lexicon, pieces, lm_path(cfg))
    log.info("beam search: %d-word lexicon, LM %s", len(lexicon.words) - 1, spec.lm_path or "none")
    return spec


def tuned_values(cfg) -> dict | None:
    """The best {lm_weight, word_score} of the dev-set sweep, if there is one to use."""
    if not cfg.decode.use_tuned:
        return None
    path = Path(cfg.decode.tuning_file)
    if not path.is_file():
        log.warning("%s not found (run `python -m asr.tune`); using decode.lm_weight/word_score", path)
        return None
    try:
        best = json.loads(path.read_text())["best"]
        return {"lm_weight": float(best["lm_weight"]), "word_score": float(best["word_score"])}
    except (ValueError, KeyError, TypeError) as err:
        raise InputError(f"{path}: not a tuning result ({err}); delete it and re-run `python -m asr.tune`") from None


def beam_options(cfg, use_tuned: bool = True) -> BeamOptions:
    options = BeamOptions(
        beam_size=int(cfg.decode.beam_size),
        beam_size_token=int(cfg.decode.beam_size_token),
        beam_threshold=float(cfg.decode.beam_threshold),
        lm_weight=float(cfg.decode.lm_weight),
        word_score=float(cfg.decode.word_score),
    )
    tuned = tuned_values(cfg) if use_tuned else None
    if tuned is not None:
        options = replace(options, **tuned)
        log.info(
            "LM weight %g, word score %g: tuned on the dev set (%s)",
            options.lm_weight,
            options.word_score,
            cfg.decode.tuning_file,
        )
    else:
        log.info("LM weight %g, word score %g: from the config", options.lm_weight, options.word_score)
    return options


# --- worker processes -------------------------------------------------------------------

_worker_decoder: BeamSearchDecoder | None = None


def _init_worker(spec: BeamSpec) -> None:
    global _worker_decoder
    _worker_decoder = BeamSearchDecoder(spec.lexicon, list(spec.pieces), BLANK_ID, spec.lm_path)


def _init_forked_worker(spec: BeamSpec) -> None:
    default_signals()
    _init_worker(spec)


def _decode_in_worker(task: tuple[np.ndarray, BeamOptions]) -> Hypothesis:
    log_probs, options = task
    return _worker_decoder.decode(log_probs, options)


class ParallelBeamSearch:
    """Beam search of many utterances over `jobs` processes (in-process when jobs <= 1)."""

    def __init__(self, spec: BeamSpec, jobs: int):
        self.jobs = max(1, int(jobs))
        if self.jobs == 1:
            _init_worker(spec)
            self.pool = None
        else:
            # fork: workers start at once and share the parent's memory; they never use torch.
            self.pool = multiprocessing.get_context("fork").Pool(
                self.jobs, initializer=_init_forked_worker, initargs=(spec,)
            )

    def __call__(self, log_probs: list[np.ndarray], options: BeamOptions) -> list[Hypothesis]:
        tasks = [(lp, options) for lp in log_probs]
        if self.pool is None:
            return [_decode_in_worker(task) for task in tasks]
        return self.pool.map(_decode_in_worker, tasks, chunksize=max(1, len(tasks) // (4 * self.jobs)))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool.join()
            self.pool = None

    def __enter__(self) -> "ParallelBeamSearch":
        return self

    def __exit__(self, *exc) -> None:
        if self.pool is not None and exc[0] is not None:
            self.pool.terminate()
        self.close()


def as_arrays(log_probs: torch.Tensor, lengths: torch.Tensor) -> list[np.ndarray]:
    """A padded (B, T, V) batch -> one float32 (T_b, V) array per utterance."""
    batch = log_probs.detach().float().cpu().numpy()
    return [batch[b, : int(lengths[b])] for b in range(batch.shape[0])]


def greedy_search(log_probs: torch.Tensor, lengths: torch.Tensor) -> list[Hypothesis]:
    return ctc_greedy(log_probs, lengths, blank=BLANK_ID)


def beam_search(pool: ParallelBeamSearch, options: BeamOptions) -> Search:
    return lambda log_probs, lengths: pool(as_arrays(log_probs, lengths), options)
