"""The decode stage: a checkpoint, the feature sets in decode.sets -> hyp.txt and hyp.ctm.

Outputs go to `<exp_dir>/decode_<set>/`, each file written atomically; a re-run decodes
again (cheap next to training) so the files always match the chosen checkpoint. An utterance
whose features hold NaN/inf is skipped (no hypothesis: scored as deletions), counted in the
log and listed in `decode_<set>/skipped`; a model whose outputs are not finite on finite
features is refused (a broken checkpoint), never decoded into empty hypotheses.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from asr.data.datadir import DataDir, read_data_dir
from asr.decode.output import CtmLine, ctm_lines, decode_dir, timed_words, write_ctm, write_hyp_text
from asr.decode.search import ParallelBeamSearch, Search, beam_options, beam_search, beam_spec, greedy_search
from asr.models.blstm import AcousticModel
from asr.text.tokenizer import Tokenizer, tokenizer_model_path
from asr.train.checkpoint import CheckpointDir, load_checkpoint, model_from_checkpoint
from asr.train.data import FeatureReader, NonFiniteFeatures, data_set_dir, feature_set_dir
from asr.train.device import select_device
from asr.utils.atomic import write_text
from asr.utils.errors import InputError

log = logging.getLogger(__name__)


def decode_sets(cfg) -> list[str]:
    return list(cfg.decode.sets) or [cfg.data.eval_set]


def load_checkpoint_with_head(cfg, head: str, otherwise: str) -> tuple[dict, Path]:
    """decode.checkpoint (last | best | path), refused with `otherwise` unless the model has `head`."""
    path = CheckpointDir(Path(cfg.exp_dir) / "checkpoints").resolve(str(cfg.decode.checkpoint))
    state = load_checkpoint(path, map_location="cpu")
    actual = state["model_info"]["config"].get("head", "ctc")
    if actual != head:
        raise InputError(f"{path}: a model with a {actual!r} head; {otherwise}")
    return state, path


def load_decoding_model(cfg, device: torch.device) -> tuple[AcousticModel, Tokenizer]:
    """The CTC model of decode.checkpoint and the tokenizer it was trained with."""
    state, path = load_checkpoint_with_head(
        cfg, "ctc", "not CTC; export a frame_ce model's log-likelihoods for Kaldi with decode=loglikes")
    model = model_from_checkpoint(state, path).to(device)
    tokenizer = Tokenizer(tokenizer_model_path(cfg.tokenizer))
    if tokenizer.vocab_size != state["model_info"]["num_outputs"]:
        raise InputError(
            f"{tokenizer.path}: {tokenizer.vocab_size} tokens, but {path} was trained with "
            f"{state['model_info']['num_outputs']} outputs; decode with the tokenizer config used in training"
        )
    log.info("decoding with %s (epoch %d, step %d)", path, state["epoch"], state["step"])
    return model, tokenizer


def batch_log_probs(model: AcousticModel, reader: FeatureReader, utts: list[str], device: torch.device,
                    skipped: dict[str, str]) -> tuple[list[str], torch.Tensor | None, torch.Tensor | None]:
    """(utterances, log-probabilities, output lengths) of one batch; utterances with NaN/inf
    features are left out and added to `skipped` (utt -> why). Non-finite outputs on finite
    features are an InputError: the checkpoint is broken."""
    kept, feats = [], []
    for utt in utts:
        try:
            feats.append(reader(utt))
            kept.append(utt)
        except NonFiniteFeatures as err:
            skipped[utt] = str(err)
    if not kept:
        return [], None, None
    lengths = torch.tensor([f.shape[0] for f in feats])
    padded = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True).to(device)
    log_probs, out_lens = model(padded, lengths.to(device))
    for row, utt in enumerate(kept):
        if not torch.isfinite(log_probs[row, : int(out_lens[row])]).all():
            raise InputError(f"the model gives NaN/inf outputs for {utt!r} on finite features: the checkpoint is broken "
                             "(training diverged?); decode another with decode.checkpoint=best or a step-N.pt path")
    return kept, log_probs, out_lens


def report_skipped(out_dir: Path, set_name: str, skipped: dict[str, str]) -> None:
    """Log and list (decode_<set>/skipped) the utterances left undecoded; none: no file."""
    path = out_dir / "skipped"
    if not skipped:
        path.unlink(missing_ok=True)
        return
    write_text(path, "".join(f"{utt} {reason}\n" for utt, reason in sorted(skipped.items())))
    log.warning("%s: %d utterances not decoded (NaN/inf features; scored as deletions), listed in %s: %s",
                set_name, len(skipped), path, " ".join(sorted(skipped)[:10]))


def length_sorted_batches(utts: list[str], num_frames: dict[str, int], batch_size: int) -> list[list[str]]:
    """Longest first, so padding inside a batch is small."""
    ordered = sorted(utts, key=lambda u: -num_frames[u])
    return [ordered[i : i + batch_size] for i in range(0, len(ordered), batch_size)]


class SetDecoder:
    """Decodes the utterances of one set batch by batch, collecting hyp text and CTM lines."""

    def __init__(
        self,
        model: AcousticModel,
        tokenizer: Tokenizer,
        device: torch.device,
        data: DataDir,
        reader: FeatureReader,
        frame_shift_ms: float,
        search: Search = greedy_search,
    ):
        self.model, self.tokenizer, self.device, self.search = model, tokenizer, device, search
        self.data, self.reader = data, reader
        self.frame_seconds = frame_shift_ms / 1000.0 * model.subsample
        self.hyps: dict[str, str] = {}
        self.ctm: list[CtmLine] = []
        self.skipped: dict[str, str] = {}  # utt -> why it was not decoded

    @torch.no_grad()
    def decode_batch(self, utts: list[str]) -> None:
        utts, log_probs, out_lens = batch_log_probs(self.model, self.reader, utts, self.device, self.skipped)
        if not utts:
            return
        for utt, hyp in zip(utts, self.search(log_probs, out_lens)):
            words = timed_words(hyp, self.tokenizer)
            self.hyps[utt] = " ".join(w.word for w in words)
            self.ctm.extend(ctm_lines(self.data, utt, words, self.frame_seconds))


def decode_set(
    cfg, set_name: str, model: AcousticModel, tokenizer: Tokenizer, device: torch.device, search: Search = greedy_search
) -> Path:
    data = read_data_dir(data_set_dir(cfg, set_name))
    reader = FeatureReader(feature_set_dir(cfg, set_name), data.utt2spk, cfg.features.norm_vars)
    if reader.feat_dim != model.input_dim:
        raise InputError(f"{reader.set_dir}/feat_dim: {reader.feat_dim}, but the model was trained on {model.input_dim}-dim features")
    utts = [u for u in reader.utts() if u in data.utt2spk]
    log.info("%s: decoding %d of %d utterances (those with features)", set_name, len(utts), len(data.utt2spk))
    decoder = SetDecoder(model, tokenizer, device, data, reader, cfg.decode.frame_shift_ms, search)
    for batch in length_sorted_batches(utts, reader.num_frames, cfg.decode.batch_size):
        decoder.decode_batch(batch)
    out_dir = decode_dir(cfg, set_name)
    write_hyp_text(out_dir / "hyp.txt", decoder.hyps)
    write_ctm(out_dir / "hyp.ctm", decoder.ctm)
    report_skipped(out_dir, set_name, decoder.skipped)
    log.info("%s: %d hypotheses, %d words -> %s", set_name, len(decoder.hyps), len(decoder.ctm), out_dir)
    return out_dir


def decode(cfg) -> list[Path]:
    """The decode stage; returns the output directories."""
    if cfg.decode.kind == "loglikes":
        from asr.decode.loglikes import export_loglikes  # imported here: it builds on this module

        return export_loglikes(cfg)
    if cfg.decode.kind == "beam_lm":
        return decode_with_lm(cfg)
    if cfg.decode.kind != "greedy":
        raise InputError(f"decode.kind={cfg.decode.kind!r}: choose greedy, beam_lm or loglikes")
    torch.set_num_threads(cfg.train.threads)  # the same CPU budget as training
    device = select_device(cfg.device)
    model, tokenizer = load_decoding_model(cfg, device)
    return [decode_set(cfg, name, model, tokenizer, device) for name in decode_sets(cfg)]


def decode_with_lm(cfg) -> list[Path]:
    """decode.kind=beam_lm: the acoustic model here, the beam search in decode.jobs workers."""
    tokenizer = Tokenizer(tokenizer_model_path(cfg.tokenizer))
    options = beam_options(cfg)
    with ParallelBeamSearch(beam_spec(cfg, tokenizer), cfg.decode.jobs) as pool:  # forked before torch runs
        torch.set_num_threads(cfg.train.threads)
        device = select_device(cfg.device)
        model, tokenizer = load_decoding_model(cfg, device)
        search = beam_search(pool, options)
        return [decode_set(cfg, name, model, tokenizer, device, search) for name in decode_sets(cfg)]
