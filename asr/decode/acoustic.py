"""The acoustic model over a data set: what decoding, LM tuning and log-likelihood export share.

    sets = evaluation_sets(cfg)                 decode.sets, or the evaluation set (asr.decode.output)
    model, state, path = load_model(cfg, "ctc", why_not, device)
    scored = ScoredSet(cfg, set_name, model, device)
    for batch in scored.batches():              longest utterances first, padded
        batch.utts, batch.log_probs, batch.out_lens, batch.feat_lens
    scored.skipped                              utt -> why it was left out

An utterance whose features hold NaN/inf is left out (and named in `skipped`); a model whose
outputs are not finite on finite features is refused: the checkpoint is broken.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch
from tqdm import tqdm

from asr.data.datadir import DataDir, data_set_dir, read_data_dir
from asr.decode.shares import Split, share_utterances
from asr.features.featureset import FeatureReader, NonFiniteFeatures, feature_set_dir
from asr.models.blstm import AcousticModel
from asr.models.checkpoint import CheckpointDir, load_checkpoint, model_from_checkpoint
from asr.utils.errors import InputError

log = logging.getLogger(__name__)


def load_model(cfg, head: str, otherwise: str, device: torch.device) -> tuple[AcousticModel, dict, Path]:
    """The model of decode.checkpoint (last | best | path) on `device`, refused with `otherwise`
    unless it has `head`; with its checkpoint and path."""
    path = CheckpointDir(Path(cfg.exp_dir) / "checkpoints").resolve(str(cfg.decode.checkpoint))
    state = load_checkpoint(path, map_location="cpu")
    actual = state["model_info"]["config"].get("head", "ctc")
    if actual != head:
        raise InputError(f"{path}: a model with a {actual!r} head; {otherwise}")
    return model_from_checkpoint(state, path).to(device), state, path


@dataclass
class ScoredBatch:
    utts: list[str]
    log_probs: torch.Tensor  # (B, T', V), padded
    out_lens: torch.Tensor  # (B,) output frames
    feat_lens: torch.Tensor  # (B,) input frames


class ScoredSet:
    """One set's utterances (those `wanted` of its data dir that have features; in a split run
    only its share, asr/decode/shares.py) through a model."""

    def __init__(
        self,
        cfg,
        set_name: str,
        model: AcousticModel,
        device: torch.device,
        wanted: Callable[[DataDir], dict] = lambda data: data.utt2spk,
    ):
        self.set_name, self.model, self.device = set_name, model, device
        self.batch_size = cfg.decode.batch_size
        self.data = read_data_dir(data_set_dir(cfg, set_name))
        self.reader = FeatureReader(feature_set_dir(cfg, set_name), self.data.utt2spk, cfg.features.norm_vars)
        if self.reader.feat_dim != model.input_dim:
            raise InputError(
                f"{self.reader.set_dir}/feat_dim: {self.reader.feat_dim}, "
                f"but the model was trained on {model.input_dim}-dim features"
            )
        chosen = wanted(self.data)
        self.utts = [u for u in self.reader.utts() if u in chosen]
        split = Split.of(cfg)
        if split.is_share:  # a cluster array task (decode.split): its share of the utterances only
            self.utts = share_utterances(self.utts, self.reader.num_frames, split)
        self.skipped: dict[str, str] = {}

    def length_sorted(self) -> list[list[str]]:
        """Longest first, so padding inside a batch is small."""
        ordered = sorted(self.utts, key=lambda u: -self.reader.num_frames[u])
        return [ordered[i : i + self.batch_size] for i in range(0, len(ordered), self.batch_size)]

    @torch.no_grad()
    def batches(self, desc: str = "") -> Iterator[ScoredBatch]:
        for utts in tqdm(
            self.length_sorted(), desc=desc or self.set_name, disable=None, leave=False, dynamic_ncols=True
        ):
            batch = self.score(utts)
            if batch is not None:
                yield batch

    def score(self, utts: list[str]) -> ScoredBatch | None:
        kept, feats = [], []
        for utt in utts:
            try:
                feats.append(self.reader(utt))
                kept.append(utt)
            except NonFiniteFeatures as err:
                self.skipped[utt] = str(err)
        if not kept:
            return None
        lengths = torch.tensor([f.shape[0] for f in feats])
        padded = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True).to(self.device)
        log_probs, out_lens = self.model(padded, lengths.to(self.device))
        for row, utt in enumerate(kept):
            if not torch.isfinite(log_probs[row, : int(out_lens[row])]).all():
                raise InputError(
                    f"the model gives NaN/inf outputs for {utt!r} on finite features: the checkpoint is broken "
                    "(training diverged?); decode another with decode.checkpoint=best or a step-N.pt path"
                )
        return ScoredBatch(kept, log_probs, out_lens, lengths)
