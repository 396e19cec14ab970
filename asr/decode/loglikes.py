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
from tqdm import tqdm

from asr.data.datadir import c_sort_key, read_data_dir
from asr.decode.output import decode_dir
from asr.decode.stage import decode_sets, length_sorted_batches, load_checkpoint_with_head
from asr.models.blstm import AcousticModel
from asr.train.alignments import read_pdf_counts
from asr.train.checkpoint import model_from_checkpoint
from asr.train.data import FeatureReader, data_set_dir, feature_set_dir
from asr.train.device import select_device
from asr.train.objectives import PDF_COUNTS_NAME
from asr.utils.atomic import atomic_path
from asr.utils.errors import InputError

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


def load_frame_ce_model(cfg, device: torch.device) -> tuple[AcousticModel, Path]:
    state, path = load_checkpoint_with_head(
        cfg, "frame_ce", "log-likelihoods need a frame_ce (hybrid) model (decode.kind=greedy decodes CTC)")
    log.info("log-likelihoods of %s (epoch %d, step %d)", path, state["epoch"], state["step"])
    return model_from_checkpoint(state, path).to(device), path


def load_log_priors(cfg, num_pdfs: int) -> Tensor:
    path = Path(cfg.decode.pdf_counts or Path(cfg.exp_dir) / PDF_COUNTS_NAME)
    counts = read_pdf_counts(path)
    if len(counts) != num_pdfs:
        raise InputError(f"{path}: counts of {len(counts)} pdfs, but the model has {num_pdfs} outputs; use the counts of its training alignments")
    priors = log_priors(counts)
    log.info("priors from %s: %d pdfs, %d never seen (disabled)", path, num_pdfs, int(np.sum(priors == UNSEEN_LOG_PRIOR)))
    return torch.from_numpy(priors)


class SetExporter:
    """Runs the model over one set batch by batch and writes each utterance's log-likelihoods."""

    def __init__(self, model: AcousticModel, log_prior: Tensor, reader: FeatureReader, device: torch.device, prior_scale: float, upsample: bool):
        self.model, self.reader, self.device = model, reader, device
        self.log_prior = log_prior.to(device)
        self.prior_scale, self.upsample = prior_scale, upsample
        self.frames = 0

    @torch.no_grad()
    def export_batch(self, utts: list[str], archive: LoglikeWriter) -> None:
        feats = [self.reader(u) for u in utts]
        lengths = torch.tensor([f.shape[0] for f in feats])
        padded = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True).to(self.device)
        log_probs, out_lens = self.model(padded, lengths.to(self.device))
        for b, utt in enumerate(utts):
            loglikes = scaled_loglikes(log_probs[b, : int(out_lens[b])], self.log_prior, self.prior_scale)
            if self.upsample:
                loglikes = upsample(loglikes, self.model.subsample, int(lengths[b]))
            archive.write(utt, loglikes.float().cpu().numpy())
            self.frames += loglikes.shape[0]


def export_set(cfg, set_name: str, model: AcousticModel, log_prior: Tensor, device: torch.device) -> Path:
    data = read_data_dir(data_set_dir(cfg, set_name))
    reader = FeatureReader(feature_set_dir(cfg, set_name), data.utt2spk, cfg.features.norm_vars)
    if reader.feat_dim != model.input_dim:
        raise InputError(f"{reader.set_dir}/feat_dim: {reader.feat_dim}, but the model was trained on {model.input_dim}-dim features")
    utts = [u for u in reader.utts() if u in data.utt2spk]
    exporter = SetExporter(model, log_prior, reader, device, cfg.decode.prior_scale, cfg.decode.upsample)
    out_dir = decode_dir(cfg, set_name)
    batches = length_sorted_batches(utts, reader.num_frames, cfg.decode.batch_size)
    with loglike_archive(out_dir) as archive:
        for batch in tqdm(batches, desc=f"loglikes {set_name}", disable=None, leave=False, dynamic_ncols=True):
            exporter.export_batch(batch, archive)
    shift = cfg.features.frame_shift_ms * (1 if cfg.decode.upsample else model.subsample)
    rate = f"frames of {shift:g} ms"
    log.info("%s: log-likelihoods of %d utterances, %d %s -> %s", set_name, len(utts), exporter.frames, rate, out_dir / "loglikes.scp")
    return out_dir


def export_loglikes(cfg) -> list[Path]:
    """The decode stage for decode.kind=loglikes; returns the output directories."""
    torch.set_num_threads(cfg.train.threads)
    device = select_device(cfg.device)
    model, _ = load_frame_ce_model(cfg, device)
    num_pdfs = model.head.linear.out_features
    log_prior = load_log_priors(cfg, num_pdfs)
    return [export_set(cfg, name, model, log_prior, device) for name in decode_sets(cfg)]
