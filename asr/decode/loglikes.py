"""Log-likelihoods of a hybrid (frame_ce) model for Kaldi's decoders: `decode.kind=loglikes`.

`python -m asr.decode decode=loglikes` writes, for each set of decode.sets,

    <exp_dir>/decode_<set>/loglikes.ark   Kaldi binary float matrices, one per utterance:
                                          rows = frames, columns = pdf ids
    <exp_dir>/decode_<set>/loglikes.scp   `utt <abs path>/loglikes.ark:<offset>`, sorted

with log p(x|s) = log P(s|x) - prior_scale * log P(s) (a scaled likelihood: the constant
log p(x) does not change a decoder's best path). Kaldi decodes them with the graph of the
alignment model, e.g. `latgen-faster-mapped final.mdl HCLG.fst scp:loglikes.scp ark:lat.1`;
nothing of this toolkit is needed on the Kaldi side.

Priors. P(s) is the relative frequency of pdf s among the training targets, from
`<exp_dir>/pdf_counts` (written by training) or decode.pdf_counts (any Kaldi counts vector,
e.g. nnet1's ali_train_pdf.counts). As Kaldi's nnet1 PdfPrior does, a pdf with relative
frequency below 1e-10 (never a target) gets log prior sqrt(FLT_MAX): the network never
learned it, and a tiny prior would otherwise turn its tiny posterior into a large likelihood.

Frame rate. With model.subsample = s the network emits one frame per s input frames. By
default (decode.upsample=true) each output frame is repeated s times and the result cut to
the utterance's feature frames: one row per 10 ms frame, the same count as the features and
Kaldi's alignments, which is what a conventional HMM graph (every state at least one frame)
needs. decode.upsample=false writes the model's rate, ceil(T/s) rows, for graphs built for a
reduced frame rate (chain-style topologies, Kaldi's --frame-subsampling-factor s).
"""

from __future__ import annotations

import contextlib
import logging
import math
from pathlib import Path
from typing import BinaryIO, Iterator

import kaldiio
import numpy as np
import torch
from torch import Tensor

from asr.decode.acoustic import ScoredSet, load_model
from asr.decode.output import decode_dir, evaluation_sets
from asr.kaldi.table import c_sort_key
from asr.models.blstm import AcousticModel
from asr.kaldi.pdf_counts import PDF_COUNTS_NAME, read_pdf_counts
from asr.utils.atomic import atomic_path
from asr.utils.device import select_device
from asr.utils.errors import InputError
from asr.utils.threads import torch_threads

log = logging.getLogger(__name__)

PRIOR_FLOOR = 1e-10  # Kaldi nnet1's --prior-floor
UNSEEN_LOG_PRIOR = math.sqrt(np.finfo(np.float32).max)  # Kaldi nnet1: disables the pdf


def log_priors(counts: np.ndarray, floor: float = PRIOR_FLOOR) -> np.ndarray:
    """log relative frequencies; those below `floor` set to sqrt(FLT_MAX) (as Kaldi's nnet1)."""
    frequencies = np.asarray(counts, dtype=np.float64) / np.sum(counts)
    priors = np.log(frequencies + 1e-20)
    priors[frequencies < floor] = UNSEEN_LOG_PRIOR
    return priors.astype(np.float32)


def scaled_loglikes(log_posteriors: Tensor, log_prior: Tensor, prior_scale: float = 1.0) -> Tensor:
    """(T, V) log P(s|x) - prior_scale * log P(s)."""
    return log_posteriors - prior_scale * log_prior


def upsample(frames: Tensor, subsample: int, num_frames: int) -> Tensor:
    """Each output frame repeated for the `subsample` input frames it stands for, cut to `num_frames`."""
    return frames.repeat_interleave(subsample, dim=0)[:num_frames]


class LoglikeWriter:
    """Appends utterances to an open archive, remembering where each starts for the scp."""

    def __init__(self, ark: BinaryIO, ark_path: Path):
        self.ark, self.ark_path = ark, ark_path
        self.offsets: dict[str, int] = {}

    def write(self, utt: str, matrix: np.ndarray) -> None:
        if utt in self.offsets or not utt or " " in utt:
            raise InputError(f"{self.ark_path}: utterance id {utt!r} is empty, has a space or is repeated")
        self.offsets[utt] = self.ark.tell() + len(utt.encode()) + 1  # the scp points past "utt "
        kaldiio.save_ark(self.ark, {utt: np.ascontiguousarray(matrix, dtype=np.float32)})

    def scp_text(self) -> str:
        return "".join(f"{utt} {self.ark_path}:{self.offsets[utt]}\n" for utt in sorted(self.offsets, key=c_sort_key))


@contextlib.contextmanager
def loglike_archive(out_dir: Path) -> Iterator[LoglikeWriter]:
    """`loglikes.ark` and `loglikes.scp` in out_dir, each written under a temporary name and
    renamed when complete, the scp after the archive it points into."""
    ark_path = (out_dir / "loglikes.ark").resolve()
    with atomic_path(out_dir / "loglikes.scp") as scp_tmp:
        with atomic_path(ark_path) as ark_tmp, open(ark_tmp, "wb") as ark:
            writer = LoglikeWriter(ark, ark_path)
            yield writer
        scp_tmp.write_text(writer.scp_text())


def load_frame_ce_model(cfg, device: torch.device) -> AcousticModel:
    model, state, path = load_model(
        cfg, "frame_ce", "log-likelihoods need a frame_ce (hybrid) model (decode.kind=greedy decodes CTC)", device
    )
    log.info("log-likelihoods of %s (epoch %d, step %d)", path, state["epoch"], state["step"])
    return model


def load_log_priors(cfg, num_pdfs: int) -> Tensor:
    path = Path(cfg.decode.pdf_counts or Path(cfg.exp_dir) / PDF_COUNTS_NAME)
    counts = read_pdf_counts(path)
    if len(counts) != num_pdfs:
        raise InputError(
            f"{path}: counts of {len(counts)} pdfs, but the model has {num_pdfs} outputs; "
            "use the counts of its training alignments"
        )
    priors = log_priors(counts)
    log.info(
        "priors from %s: %d pdfs, %d never seen (disabled)", path, num_pdfs, int(np.sum(priors == UNSEEN_LOG_PRIOR))
    )
    return torch.from_numpy(priors)


def export_set(cfg, set_name: str, model: AcousticModel, log_prior: Tensor, device: torch.device) -> Path:
    scored = ScoredSet(cfg, set_name, model, device)
    log_prior = log_prior.to(device)
    out_dir, frames = decode_dir(cfg, set_name), 0
    with loglike_archive(out_dir) as archive:
        for batch in scored.batches(f"loglikes {set_name}"):
            for b, utt in enumerate(batch.utts):
                loglikes = scaled_loglikes(
                    batch.log_probs[b, : int(batch.out_lens[b])], log_prior, cfg.decode.prior_scale
                )
                if cfg.decode.upsample:
                    loglikes = upsample(loglikes, model.subsample, int(batch.feat_lens[b]))
                archive.write(utt, loglikes.float().cpu().numpy())
                frames += loglikes.shape[0]
    if scored.skipped:
        log.warning(
            "%s: %d utterances with NaN/inf features left out: %s",
            set_name,
            len(scored.skipped),
            " ".join(sorted(scored.skipped)[:10]),
        )
    shift = cfg.features.frame_shift_ms * (1 if cfg.decode.upsample else model.subsample)
    log.info(
        "%s: log-likelihoods of %d utterances, %d frames of %g ms -> %s",
        set_name,
        len(scored.utts) - len(scored.skipped),
        frames,
        shift,
        out_dir / "loglikes.scp",
    )
    return out_dir


def export_loglikes(cfg, sets: list[str] | None = None) -> list[Path]:
    """The decode stage for decode.kind=loglikes (`sets`, else decode.sets); returns the output directories."""
    with torch_threads(cfg.decode.threads):
        device = select_device(cfg.device)
        model = load_frame_ce_model(cfg, device)
        num_pdfs = model.head.linear.out_features
        log_prior = load_log_priors(cfg, num_pdfs)
        return [export_set(cfg, name, model, log_prior, device) for name in sets or evaluation_sets(cfg)]
