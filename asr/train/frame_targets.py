"""Frame-level targets for cross-entropy training: features paired with Kaldi alignments.

Frame rate. Alignments have one pdf id per 10 ms input frame. The model emits one frame per
`subsample` input frames (output frame i stands for input frames i*s .. i*s+s-1: that is where
the CTM puts it, and how asr.decode.loglikes expands it back to 10 ms). So output frame i is
trained on the pdf of the *centre* of that block, input frame min(i*s + s//2, T-1): for s = 3
the middle frame, which is also the block's majority label whenever two of its three frames
agree. An utterance of T frames has ceil(T/s) targets, exactly as many as model outputs.

Lengths. Alignment and features come from different programs (Kaldi's MFCCs, our fbank) and
may differ by a frame or two at the end (e.g. snip_edges); up to `tolerance` frames are
absorbed (the last label repeated, or the surplus dropped), like Kaldi's `--length-tolerance`.
Utterances without an alignment (Kaldi drops those it failed to align) or with a larger
mismatch are left out and counted in the log.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from asr.data.datadir import read_data_dir
from asr.features.featureset import FeatureReader
from asr.kaldi.table import c_sort_key
from asr.kaldi.alignments import AlignmentArchives
from asr.utils.errors import InputError

log = logging.getLogger(__name__)


def num_output_frames(num_frames: int, subsample: int) -> int:
    return -(-num_frames // subsample)


def subsample_targets(pdfs: np.ndarray, num_frames: int, subsample: int) -> np.ndarray:
    """One pdf id per model output frame: the centre input frame of the block it stands for."""
    centres = np.arange(num_output_frames(num_frames, subsample)) * subsample + subsample // 2
    return pdfs[np.minimum(centres, min(num_frames, len(pdfs)) - 1)]


def compact_dtype(num_pdfs_bound: int) -> np.dtype:
    """int16 when it holds every pdf id (Kaldi trees have a few thousand): half the memory."""
    return np.dtype(np.int16) if num_pdfs_bound <= np.iinfo(np.int16).max else np.dtype(np.int32)


class FrameCeDataset(Dataset):
    """(utt, features (T, D), pdf ids (ceil(T / subsample),)) for utterances with both."""

    def __init__(
        self,
        feats_set_dir: Path,
        data_dir: Path,
        alignments: AlignmentArchives,
        subsample: int,
        norm_vars: bool = True,
        tolerance: int = 2,
        num_pdfs: int = 0,
    ):
        data = read_data_dir(data_dir)
        self.reader = FeatureReader(feats_set_dir, data.utt2spk, norm_vars)
        self.alignments = alignments
        wanted = {u: self.reader.num_frames[u] for u in self.reader.utts() if u in data.utt2spk}
        targets, mismatched = {}, 0
        for utt, pdfs in alignments.read(wanted):
            if abs(len(pdfs) - wanted[utt]) > tolerance:
                mismatched += 1
                log.debug("%s: %d alignment frames for %d feature frames; left out", utt, len(pdfs), wanted[utt])
                continue
            check_pdf_range(pdfs, num_pdfs, alignments, utt)
            targets[utt] = subsample_targets(pdfs, wanted[utt], subsample).astype(
                compact_dtype(num_pdfs or int(pdfs.max()) + 1)
            )
        self.utts = sorted(targets, key=c_sort_key)
        self.targets = [targets[u] for u in self.utts]
        self.num_frames = [wanted[u] for u in self.utts]
        self._report(data_dir, len(wanted), mismatched, tolerance)

    def _report(self, data_dir: Path, with_feats: int, mismatched: int, tolerance: int) -> None:
        unaligned = with_feats - len(self.utts) - mismatched
        if not self.utts:
            raise InputError(
                f"{data_dir}: "
                f"none of its {with_feats} utterances with features ({self.reader.set_dir}) has an alignment in "
                f"{self.alignments.description} within {tolerance} frames of its length; are they of this data set?"
            )
        log.info(
            "%s: kept %d of %d utterances with features (%d without alignment, "
            "%d with lengths more than %d frames apart); alignments %s",
            data_dir,
            len(self.utts),
            with_feats,
            unaligned,
            mismatched,
            tolerance,
            self.alignments.description,
        )

    @property
    def feat_dim(self) -> int:
        return self.reader.feat_dim

    def max_pdf(self) -> int:
        return max(int(t.max()) for t in self.targets)

    def pdf_counts(self, num_pdfs: int) -> np.ndarray:
        """How often each pdf is a training target (at the model's frame rate)."""
        return np.bincount(np.concatenate(self.targets).astype(np.int64), minlength=num_pdfs)

    def __len__(self) -> int:
        return len(self.utts)

    def __getitem__(self, index: int) -> tuple[str, Tensor, Tensor]:
        utt = self.utts[index]
        return utt, self.reader(utt, index), torch.from_numpy(self.targets[index].astype(np.int64))


def check_pdf_range(pdfs: np.ndarray, num_pdfs: int, alignments: AlignmentArchives, utt: str) -> None:
    if len(pdfs) == 0:
        raise InputError(f"{alignments.spec}: {utt!r} has an empty alignment")
    low, high = int(pdfs.min()), int(pdfs.max())
    if low < 0 or (num_pdfs and high >= num_pdfs):
        raise InputError(
            f"{alignments.spec}: {utt!r} has pdf id {low if low < 0 else high}, "
            f"outside 0..{num_pdfs - 1 if num_pdfs else 'inf'}; "
            "check model.num_pdfs and train.transition_model (transition ids read as pdf ids?)"
        )
