"""Training objectives: the targets, the output layer's size and the loss the loop minimises.

The loop (asr/train/loop.py) is the same for every objective. It asks the objective for

    num_outputs                        the size of the output layer
    dataset(set_name)                  (utt, features, targets) items of a data set
    utterance_losses(log_probs, out_lens, batch)
                                       each utterance's summed loss and count (tokens, frames);
                                       the loss optimised and logged is sum / count over the batch:
                                       CTC per target token, CE per frame. Per utterance, so that
                                       the loop can leave out one whose loss is not finite
    loss(log_probs, out_lens, batch)   (summed loss, count) over the batch
    eval_stats(...) / metrics(stats)   dev statistics beyond the loss (CE: frame accuracy)
    write_training_files(exp_dir, train_set)
                                       what decoding needs later (CE: the pdf counts)

`train.objective` chooses one: `ctc` (token targets from the transcripts and the tokenizer)
or `frame_ce` (Kaldi alignments, asr/kaldi/alignments.py), and each needs its `model.head`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from asr.data.datadir import data_set_dir
from asr.features.featureset import feature_set_dir
from asr.kaldi.pdf_counts import PDF_COUNTS_NAME, write_pdf_counts
from asr.text.tokenizer import BLANK_ID, Tokenizer, tokenizer_model_path
from asr.kaldi.alignments import AlignmentArchives
from asr.train.data import Batch, CtcDataset
from asr.train.frame_targets import FrameCeDataset
from asr.utils.errors import InputError
from asr.utils.log import rank

log = logging.getLogger(__name__)


def ctc_loss_sum(log_probs: Tensor, out_lens: Tensor, batch: Batch) -> Tensor:
    """Summed CTC loss; zero_infinity so one impossible alignment cannot poison the batch."""
    return F.ctc_loss(
        log_probs.transpose(0, 1),
        batch.targets,
        out_lens,
        batch.target_lens,
        blank=BLANK_ID,
        reduction="sum",
        zero_infinity=True,
    )


def valid_frames(log_probs: Tensor, out_lens: Tensor) -> Tensor:
    """(sum of out_lens, V): the output frames of each utterance, utterance after utterance,
    which is the order the collated frame targets are concatenated in."""
    mask = torch.arange(log_probs.shape[1], device=log_probs.device)[None, :] < out_lens[:, None]
    return log_probs[mask]


def frame_ce_sum(log_probs: Tensor, out_lens: Tensor, batch: Batch) -> Tensor:
    """Summed frame-level cross-entropy against the pdf targets."""
    return frame_ce_utterance_losses(log_probs, out_lens, batch).sum()


def ctc_utterance_losses(log_probs: Tensor, out_lens: Tensor, batch: Batch) -> Tensor:
    """Each utterance's CTC loss (zero_infinity: an impossible alignment gives 0, not inf)."""
    return F.ctc_loss(
        log_probs.transpose(0, 1),
        batch.targets,
        out_lens,
        batch.target_lens,
        blank=BLANK_ID,
        reduction="none",
        zero_infinity=True,
    )


def frame_ce_utterance_losses(log_probs: Tensor, out_lens: Tensor, batch: Batch) -> Tensor:
    """Each utterance's summed frame cross-entropy. The concatenated targets are laid out as the
    output frames (B, T) and gathered there, so that no shape depends on the lengths' values: on a
    GPU a boolean mask (and its backward) and repeat_interleave read them to the host, four times."""
    frames = log_probs.shape[1]
    real = torch.arange(frames, device=log_probs.device)[None, :] < out_lens[:, None]
    per_frame = log_probs.gather(2, padded_frame_targets(batch.targets, out_lens, frames)[..., None])[..., 0]
    return -torch.where(real, per_frame, 0).sum(1)


def padded_frame_targets(targets: Tensor, out_lens: Tensor, frames: int) -> Tensor:
    """(B, frames): target i of the concatenation at its utterance's row and frame, 0 in the padding."""
    ends = out_lens.cumsum(0)
    position = torch.arange(targets.numel(), device=targets.device)
    owner = torch.searchsorted(ends, position, right=True)
    frame = position - (ends - out_lens)[owner]
    padded = torch.zeros(len(out_lens), frames, dtype=targets.dtype, device=targets.device)
    return padded.index_put_((owner, frame), targets)


class Objective:
    name = ""
    head = ""  # the model.head it trains
    unit = ""  # what the loss is averaged over
    loss_label = "loss"  # the y axis of loss.png

    def __init__(self, cfg):
        self.cfg = cfg

    @property
    def num_outputs(self) -> int:
        raise NotImplementedError

    def dataset(self, set_name: str, build: bool = True):
        """The set's items; `build=False`: files shared between learners (the training index)
        are only read, learner 0 having made them."""
        raise NotImplementedError

    def utterance_losses(self, log_probs: Tensor, out_lens: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def loss(self, log_probs: Tensor, out_lens: Tensor, batch: Batch) -> tuple[Tensor, int]:
        losses, counts = self.utterance_losses(log_probs, out_lens, batch)
        return losses.sum(), int(counts.sum())

    def eval_stats(self, log_probs: Tensor, out_lens: Tensor, batch: Batch) -> dict[str, float]:
        return {}

    def metrics(self, stats: dict[str, float]) -> dict[str, float]:
        return {}

    def write_training_files(self, exp_dir: Path, train_set) -> None:
        """Nothing by default."""


class CtcObjective(Objective):
    name = head = "ctc"
    unit = "token"
    loss_label = "CTC loss per token"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.tokenizer = Tokenizer(tokenizer_model_path(cfg.tokenizer))

    @property
    def num_outputs(self) -> int:
        return self.tokenizer.vocab_size

    def dataset(self, set_name: str, build: bool = True) -> CtcDataset:
        cfg = self.cfg
        return CtcDataset(
            feature_set_dir(cfg, set_name),
            data_set_dir(cfg, set_name),
            self.tokenizer,
            cfg.model.subsample,
            cfg.features.norm_vars,
            build=build,
        )

    def utterance_losses(self, log_probs: Tensor, out_lens: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        return ctc_utterance_losses(log_probs, out_lens, batch), batch.target_lens


class FrameCeObjective(Objective):
    """Cross-entropy of every output frame against its pdf id from a Kaldi alignment."""

    name = head = "frame_ce"
    unit = "frame"
    loss_label = "cross-entropy per frame"

    def __init__(self, cfg):
        super().__init__(cfg)
        tcfg = cfg.train
        if not tcfg.alignments:
            raise InputError(
                "train.objective=frame_ce needs train.alignments=<Kaldi alignment dir (ali.N.gz), glob, .ark or .scp>"
            )
        self.train_alignments = AlignmentArchives(tcfg.alignments, tcfg.transition_model)
        dev_spec = tcfg.dev_alignments or tcfg.alignments
        self.dev_alignments = (
            AlignmentArchives(dev_spec, tcfg.transition_model) if dev_spec != tcfg.alignments else self.train_alignments
        )
        self.declared_pdfs = self._declared_num_pdfs()
        self.datasets: list[FrameCeDataset] = []
        self._num_outputs = self.declared_pdfs

    def _declared_num_pdfs(self) -> int:
        from_model = self.train_alignments.mapping.num_pdfs if self.train_alignments.mapping else 0
        configured = self.cfg.model.num_pdfs
        if configured and from_model and configured != from_model:
            raise InputError(
                f"model.num_pdfs={configured}, but {self.train_alignments.mapping.source} has {from_model} pdfs; "
                "leave model.num_pdfs=0 or fix it"
            )
        return configured or from_model

    @property
    def num_outputs(self) -> int:
        if not self._num_outputs:
            if not self.datasets:
                raise RuntimeError("the number of pdfs comes from the alignments: read the datasets first")
            self._num_outputs = 1 + max(d.max_pdf() for d in self.datasets)
            log.warning(
                "model.num_pdfs=0 and the alignments hold pdf ids: %d outputs from the largest pdf id seen; "
                "set model.num_pdfs "
                "(Kaldi: "
                "tree-info <ali dir>/tree | grep num-pdfs) so pdfs absent from these alignments get outputs too",
                self._num_outputs,
            )
        return self._num_outputs

    def dataset(self, set_name: str, build: bool = True) -> FrameCeDataset:
        cfg = self.cfg
        is_dev = set_name == cfg.data.dev_set and set_name != cfg.data.train_set
        alignments = self.dev_alignments if is_dev else self.train_alignments
        try:
            dataset = FrameCeDataset(
                feature_set_dir(cfg, set_name),
                data_set_dir(cfg, set_name),
                alignments,
                cfg.model.subsample,
                cfg.features.norm_vars,
                tolerance=cfg.train.ali_length_tolerance,
                num_pdfs=self.declared_pdfs,
            )
        except InputError as err:
            if is_dev and not cfg.train.dev_alignments:
                raise InputError(
                    f"{err}\nKaldi's held-out set is usually aligned separately: "
                    "set train.dev_alignments=<its alignments>"
                ) from None
            raise
        self.datasets.append(dataset)
        return dataset

    def utterance_losses(self, log_probs: Tensor, out_lens: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        return frame_ce_utterance_losses(log_probs, out_lens, batch), out_lens

    def eval_stats(self, log_probs: Tensor, out_lens: Tensor, batch: Batch) -> dict[str, float]:
        best = valid_frames(log_probs, out_lens).argmax(dim=-1)
        return {"correct": float((best == batch.targets).sum()), "frames": float(batch.targets.numel())}

    def metrics(self, stats: dict[str, float]) -> dict[str, float]:
        return {"frame_accuracy": stats["correct"] / stats["frames"]} if stats.get("frames") else {}

    def write_training_files(self, exp_dir: Path, train_set: FrameCeDataset) -> None:
        """`<exp_dir>/pdf_counts`: how often each pdf is a training target, for the priors."""
        if rank() != 0:
            return
        counts = train_set.pdf_counts(self.num_outputs)
        write_pdf_counts(Path(exp_dir) / PDF_COUNTS_NAME, counts)
        log.info(
            "%s: counts of %d pdfs over %d training frames (%d pdfs never seen)",
            Path(exp_dir) / PDF_COUNTS_NAME,
            len(counts),
            int(counts.sum()),
            int(np.sum(counts == 0)),
        )


OBJECTIVES: dict[str, type[Objective]] = {"ctc": CtcObjective, "frame_ce": FrameCeObjective}


def build_objective(cfg) -> Objective:
    """The objective of train.objective, checked against model.head."""
    name = cfg.train.objective
    if name not in OBJECTIVES:
        raise InputError(f"train.objective={name!r}: choose one of {', '.join(OBJECTIVES)}")
    objective = OBJECTIVES[name]
    if cfg.model.head != objective.head:
        raise InputError(
            f"train.objective={name} trains model.head={objective.head}, but model.head={cfg.model.head}; "
            f"set both (experiment=hybrid_ce does it for frame_ce)"
        )
    return objective(cfg)
