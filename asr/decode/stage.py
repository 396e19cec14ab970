"""The decode stage: a checkpoint, the feature sets in decode.sets -> hyp.txt and hyp.ctm.

Outputs go to `<exp_dir>/decode_<set>/`, each file written atomically, then the set's stage
record `decode.record.json` (asr/decode/record.py): a set whose record names the same options
and unchanged inputs (the checkpoint, its features, the tokenizer, the LM, the tuning, ...) is
not decoded again, and the log says why one is. An utterance
whose features hold NaN/inf is skipped (no hypothesis: scored as deletions), counted in the
log and listed in `decode_<set>/skipped`; a model whose outputs are not finite on finite
features is refused (a broken checkpoint), never decoded into empty hypotheses.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from asr.data.ctm import CtmWord
from asr.data.datadir import DataDir
from asr.decode.acoustic import ScoredSet, load_model
from asr.decode.loglikes import export_loglikes
from asr.decode.output import ctm_words, decode_dir, evaluation_sets, timed_words
from asr.decode.record import DECODE_RERUN, DECODE_STAGE, decode_outputs, decoded_from
from asr.decode.shares import Split, merge_decoded, write_decoded
from asr.decode.search import ParallelBeamSearch, Search, beam_options, beam_search, beam_spec, greedy_search
from asr.decode.wfst import decode_wfst
from asr.models.blstm import AcousticModel
from asr.text.tokenizer import Tokenizer, tokenizer_model_path
from asr.utils.device import select_device
from asr.utils.errors import InputError
from asr.utils.record import record_path, why_rerun, write_record
from asr.utils.threads import torch_threads

log = logging.getLogger(__name__)


def load_decoding_model(cfg, device: torch.device) -> tuple[AcousticModel, Tokenizer]:
    """The CTC model of decode.checkpoint and the tokenizer it was trained with."""
    model, state, path = load_model(
        cfg, "ctc", "not CTC; export a frame_ce model's log-likelihoods for Kaldi with decode=loglikes", device
    )
    tokenizer = Tokenizer(tokenizer_model_path(cfg.tokenizer))
    if tokenizer.vocab_size != state["model_info"]["num_outputs"]:
        raise InputError(
            f"{tokenizer.path}: {tokenizer.vocab_size} tokens, but {path} was trained with "
            f"{state['model_info']['num_outputs']} outputs; decode with the tokenizer config used in training"
        )
    log.info("decoding with %s (epoch %d, step %d)", path, state["epoch"], state["step"])
    return model, tokenizer


class SetDecoder:
    """Turns the scored batches of one set into hyp text and CTM lines."""

    def __init__(self, tokenizer: Tokenizer, data: DataDir, frame_seconds: float, search: Search = greedy_search):
        self.tokenizer, self.data, self.frame_seconds, self.search = tokenizer, data, frame_seconds, search
        self.hyps: dict[str, str] = {}
        self.ctm: list[CtmWord] = []

    def decode_batch(self, utts: list[str], log_probs: torch.Tensor, out_lens: torch.Tensor) -> None:
        for utt, hyp in zip(utts, self.search(log_probs, out_lens)):
            words = timed_words(hyp, self.tokenizer)
            self.hyps[utt] = " ".join(w.word for w in words)
            self.ctm.extend(ctm_words(self.data, utt, words, self.frame_seconds))


def decode_set(
    cfg, set_name: str, model: AcousticModel, tokenizer: Tokenizer, device: torch.device, search: Search = greedy_search
) -> Path:
    scored = ScoredSet(cfg, set_name, model, device)
    split = Split.of(cfg)
    log.info(
        "%s: decoding %d of %d utterances (%s)",
        set_name,
        len(scored.utts),
        len(scored.data.utt2spk),
        f"share {split.name}" if split.is_share else "those with features",
    )
    decoder = SetDecoder(tokenizer, scored.data, cfg.decode.frame_shift_ms / 1000.0 * model.subsample, search)
    for batch in scored.batches(f"decode {set_name}"):
        decoder.decode_batch(batch.utts, batch.log_probs, batch.out_lens)
    out_dir = write_decoded(cfg, set_name, decoder.hyps, decoder.ctm, scored.skipped)
    log.info("%s: %d hypotheses, %d words -> %s", set_name, len(decoder.hyps), len(decoder.ctm), out_dir)
    return out_dir


def decode(cfg) -> list[Path]:
    """The decode stage, by decode.kind; returns the output directories. With decode.split.count
    N: share decode.split.index alone, or (index -1) the N shares merged (asr/decode/shares.py).
    Sets whose record says they are decoded already are left as they are."""
    if cfg.decode.kind not in DECODERS:
        raise InputError(f"decode.kind={cfg.decode.kind!r}: choose one of {', '.join(DECODERS)}")
    split = Split.of(cfg)
    if split.count and cfg.decode.kind not in SPLIT_KINDS:
        raise InputError(f"decode.kind={cfg.decode.kind}: not split into shares; leave decode.split.count=0")
    sets = sets_to_decode(cfg)
    if not sets:
        return [decode_dir(cfg, name) for name in evaluation_sets(cfg)]
    if split.is_share:  # a share's hypotheses are the merge's input: the merge records the set
        return DECODERS[cfg.decode.kind](cfg, sets)
    for name in sets:  # an old record must not vouch for the files about to be replaced
        record_path(decode_dir(cfg, name), DECODE_STAGE).unlink(missing_ok=True)
    if split.is_merge:
        merge_decoded(cfg, sets)
    else:
        DECODERS[cfg.decode.kind](cfg, sets)
    for name in sets:
        write_record(
            decode_dir(cfg, name), DECODE_STAGE, DECODE_RERUN, *decoded_from(cfg, name), decode_outputs(cfg, name)
        )
    return [decode_dir(cfg, name) for name in evaluation_sets(cfg)]


def sets_to_decode(cfg) -> list[str]:
    """The sets of decode.sets whose decode record does not match (each logged with the reason)."""
    wanted = []
    for name in evaluation_sets(cfg):
        reason = why_rerun(decode_dir(cfg, name), DECODE_STAGE, *decoded_from(cfg, name))
        if reason is None:
            log.info("%s: decoded already (%s), skipping", name, record_path(decode_dir(cfg, name), DECODE_STAGE))
        else:
            log.info("%s: decoding (%s)", name, reason)
            wanted.append(name)
    return wanted


def decode_greedy(cfg, sets: list[str] | None = None) -> list[Path]:
    """decode.kind=greedy: the best path of the CTC outputs (of `sets`, else decode.sets)."""
    with torch_threads(cfg.decode.threads):
        device = select_device(cfg.device)
        model, tokenizer = load_decoding_model(cfg, device)
        return [decode_set(cfg, name, model, tokenizer, device) for name in sets or evaluation_sets(cfg)]


def decode_with_lm(cfg, sets: list[str] | None = None) -> list[Path]:
    """decode.kind=beam_lm: the acoustic model here, the beam search in decode.jobs workers."""
    tokenizer = Tokenizer(tokenizer_model_path(cfg.tokenizer))
    options = beam_options(cfg)
    # The workers are forked before torch runs.
    with ParallelBeamSearch(beam_spec(cfg, tokenizer), cfg.decode.jobs) as pool, torch_threads(cfg.decode.threads):
        device = select_device(cfg.device)
        model, tokenizer = load_decoding_model(cfg, device)
        search = beam_search(pool, options)
        return [decode_set(cfg, name, model, tokenizer, device, search) for name in sets or evaluation_sets(cfg)]


DECODERS = {"greedy": decode_greedy, "beam_lm": decode_with_lm, "loglikes": export_loglikes, "wfst": decode_wfst}
SPLIT_KINDS = ("greedy", "beam_lm", "wfst")  # those writing hyp.{txt,ctm}
