"""The GMM systems' features: MFCCs and their deltas, made from a stored log-mel feature set.

Diagonal-covariance GMMs want decorrelated features: Kaldi's GMM recipes train on 13 MFCCs
with deltas and delta-deltas (39 dims), not on log-mel filterbanks, whose neighbouring bins
correlate strongly. An MFCC is the DCT of the log-mel energies (Kaldi's compute-mfcc-feats:
ComputeDctMatrix, the first 13 rows, then the cepstral lifter 1 + L/2 sin(pi k / L), L = 22),
so the cepstra are computed here from the recipe's log-mel set (`features=logmel40`) rather
than extracted again. The set's mean normalisation (read with norm_vars=False, as Kaldi's
apply-cmvn does for MFCCs) commutes with the DCT: the result is cepstral mean normalisation.
`front_end=stored` uses the set's features as they are (e.g. fMLLR features) with deltas.

`cmvn=speaker` normalises by speaker, as Kaldi's GMM recipes do (compute_cmvn_stats.sh with
spk2utt), where the set stores statistics per utterance: a speaker's statistics are the sum of
its utterances'. Per utterance, a short utterance's mean is half silence and a long one's mostly
speech, so the same silence comes out as different features in each and the models blur it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from asr.features.cmvn import Cmvn, merge_stats
from asr.features.deltas import add_deltas
from asr.features.featureset import FeatureReader
from asr.features.splice import splice, splice_opts
from asr.kaldi.matrix import apply_transform, read_matrix, read_transform_ark, write_matrix, write_transform_ark
from asr.utils.atomic import write_text
from asr.utils.errors import InputError

FRONT_ENDS = ("mfcc", "stored")
CMVN_UNITS = ("set", "speaker")  # set: as the feature set stores it


def speaker_cmvn(cmvn: Cmvn, utt2spk: dict[str, str]) -> Cmvn:
    """Per-speaker normalisation from a set's per-utterance statistics (summed by speaker);
    statistics already per speaker or global are kept."""
    if cmvn.unit != "utterance":
        return cmvn
    stats = merge_stats({utt2spk[utt]: value} for utt, value in cmvn.stats.items() if utt in utt2spk)
    return Cmvn("speaker", stats, utt2spk, cmvn.norm_vars)


@functools.lru_cache(maxsize=4)
def dct_matrix(num_ceps: int, num_bins: int) -> np.ndarray:
    """(num_ceps, num_bins): the first rows of Kaldi's ComputeDctMatrix (an orthonormal DCT-II)."""
    k = np.arange(num_ceps)[:, None]
    n = np.arange(num_bins)[None, :]
    dct = np.sqrt(2.0 / num_bins) * np.cos(np.pi / num_bins * (n + 0.5) * k)
    dct[0] = np.sqrt(1.0 / num_bins)
    return dct


@functools.lru_cache(maxsize=4)
def lifter_coefficients(num_ceps: int, lifter: float) -> np.ndarray:
    """Kaldi's ComputeLifterCoeffs: 1 + L/2 sin(pi k / L); no liftering when L is 0."""
    k = np.arange(num_ceps)
    return 1.0 + 0.5 * lifter * np.sin(np.pi * k / lifter) if lifter else np.ones(num_ceps)


def cepstra(logmel: np.ndarray, num_ceps: int, lifter: float) -> np.ndarray:
    """(T, num_bins) log-mel energies -> (T, num_ceps) liftered MFCCs."""
    return (logmel @ dct_matrix(num_ceps, logmel.shape[1]).T * lifter_coefficients(num_ceps, lifter)).astype(np.float32)


class GmmFeatures:
    """Per utterance: the static features (MFCCs, or the stored features) of a feature set; the
    deltas are added by `with_deltas`, so that the statics can be stored compactly between passes."""

    def __init__(
        self,
        set_dir: str | Path,
        utt2spk: dict[str, str],
        front_end: str,
        num_ceps: int,
        lifter: float,
        cmvn: str = "set",
    ):
        """`utt2spk`: every utterance of the set (cmvn=speaker sums a speaker's statistics)."""
        if front_end not in FRONT_ENDS:
            raise InputError(f"gmm.front_end={front_end!r}: choose one of {FRONT_ENDS}")
        if cmvn not in CMVN_UNITS:
            raise InputError(f"gmm.cmvn={cmvn!r}: choose one of {CMVN_UNITS}")
        self.reader = FeatureReader(set_dir, utt2spk, norm_vars=front_end == "stored")
        if cmvn == "speaker":
            self.reader.cmvn = speaker_cmvn(self.reader.cmvn, utt2spk)
        if front_end == "mfcc" and self.reader.layout.deltas:
            raise InputError(
                f"{set_dir}: gmm.front_end=mfcc needs a log-mel set without deltas (e.g. features=logmel40)"
            )
        if front_end == "mfcc" and num_ceps > self.reader.feat_dim:
            raise InputError(f"gmm.num_ceps={num_ceps}: more than the {self.reader.feat_dim} log-mel bins of {set_dir}")
        self.front_end, self.num_ceps, self.lifter = front_end, num_ceps, lifter
        self.dim = num_ceps if front_end == "mfcc" else self.reader.feat_dim

    def statics(self, utt: str) -> np.ndarray:
        feats = self.reader.matrix(utt)
        return cepstra(feats, self.num_ceps, self.lifter) if self.front_end == "mfcc" else feats


def with_deltas(statics: np.ndarray, order: int, window: int = 2) -> np.ndarray:
    """Kaldi's add-deltas (order 2: 13 MFCCs -> 39 dims)."""
    return add_deltas(statics, order, window).astype(np.float32) if order else statics


@dataclass
class Projection:
    """How a system's features come from the statics: deltas (train_deltas.sh), or the frames
    spliced +-`splice` and projected by `matrix` (LDA+MLLT, train_lda_mllt.sh; deltas then
    unused), then each speaker's fMLLR transform y = A x + b (SAT, train_sat.sh). Saved in a
    system's dir as Kaldi keeps them: final.mat, splice_opts, trans.ark (speaker -> [A b])."""

    delta_order: int = 0
    splice: int = 0
    matrix: np.ndarray | None = None  # (d, statics * (2 splice + 1))
    speaker_transforms: dict[str, np.ndarray] | None = None  # speaker -> (d, d + 1)
    utt2spk: dict[str, str] = field(default_factory=dict)  # of the utterances it is applied to

    def speaker_independent(self, statics: np.ndarray) -> np.ndarray:
        if self.matrix is None:
            return with_deltas(statics, self.delta_order)
        return (splice(statics, self.splice, self.splice) @ self.matrix.T).astype(np.float32)

    def adapt(self, utt: str, feats: np.ndarray) -> np.ndarray:
        """A speaker-independent frame block of `utt` with its speaker's transform (if any)."""
        transform = (self.speaker_transforms or {}).get(self.utt2spk.get(utt, ""))
        return feats if transform is None else apply_transform(feats, transform)

    def __call__(self, utt: str, statics: np.ndarray) -> np.ndarray:
        return self.adapt(utt, self.speaker_independent(statics))

    @property
    def adapted(self) -> bool:
        return self.speaker_transforms is not None

    def dim(self, statics_dim: int) -> int:
        if self.matrix is not None:
            return self.matrix.shape[0]
        return statics_dim * (1 + self.delta_order)

    def for_utterances(self, utts) -> "Projection":
        """The same projection carrying only these utterances' speakers (what a job needs)."""
        if not self.adapted:
            return self
        utt2spk = {u: self.utt2spk[u] for u in utts if u in self.utt2spk}
        transforms = {s: self.speaker_transforms[s] for s in set(utt2spk.values()) if s in self.speaker_transforms}
        return replace(self, speaker_transforms=transforms, utt2spk=utt2spk)

    def without_speakers(self) -> "Projection":
        return replace(self, speaker_transforms=None, utt2spk={})

    def save(self, out_dir: Path) -> None:
        if self.matrix is not None:
            write_matrix(out_dir / "final.mat", self.matrix)
            write_text(out_dir / "splice_opts", splice_opts(self.splice, self.splice))
        if self.speaker_transforms is not None:
            write_transform_ark(out_dir / "trans.ark", self.speaker_transforms)

    @classmethod
    def load(cls, model_dir: Path, delta_order: int, utt2spk: dict[str, str] | None = None) -> "Projection":
        """A system's projection from its dir (the transforms only with `utt2spk`: those of a
        training set's speakers; another set's are estimated by decoding)."""
        model_dir = Path(model_dir)
        matrix, context = None, 0
        if (model_dir / "final.mat").is_file():
            matrix = read_matrix(model_dir / "final.mat")
            context = read_splice_context(model_dir / "splice_opts")
        transforms = None
        if utt2spk is not None and (model_dir / "trans.ark").is_file():
            transforms = read_transform_ark(model_dir / "trans.ark")
        return cls(delta_order, context, matrix, transforms, dict(utt2spk or {}))


def read_splice_context(path: Path) -> int:
    """The +-context of a splice_opts file (`--left-context=L --right-context=L`)."""
    try:
        values = dict(option.lstrip("-").split("=") for option in path.read_text().split())
        left, right = int(values["left-context"]), int(values["right-context"])
    except (OSError, KeyError, ValueError):
        raise InputError(f"{path}: not Kaldi splice options (--left-context=N --right-context=N)") from None
    if left != right:
        raise InputError(f"{path}: left and right context differ ({left}, {right}); only symmetric splicing is read")
    return left
