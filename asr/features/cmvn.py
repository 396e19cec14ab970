"""Cepstral mean and variance normalisation with statistics in Kaldi's format.

Kaldi stores CMVN statistics as a 2 x (D+1) double matrix: row 0 holds the per-dimension
sums and, in the last column, the frame count; row 1 holds the sums of squares (last column
0). `cmvn.scp` maps a key to such a matrix; the key is an utterance, a speaker or "global"
depending on the normalisation unit, which is recorded in the `cmvn_type` file beside it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable

import kaldiio
import numpy as np

from asr.kaldi import commands
from asr.utils.errors import InputError, error_detail

UNITS = ("utterance", "speaker", "global", "none")
VARIANCE_FLOOR = 1e-10


def accumulate(feats: Iterable[np.ndarray]) -> np.ndarray:
    """Kaldi CMVN stats (2 x D+1, float64) over all frames of the given matrices."""
    stats: np.ndarray | None = None
    for mat in feats:
        mat = np.asarray(mat, dtype=np.float64)
        if stats is None:
            stats = np.zeros((2, mat.shape[1] + 1))
        stats[0, :-1] += mat.sum(axis=0)
        stats[1, :-1] += (mat * mat).sum(axis=0)
        stats[0, -1] += mat.shape[0]
    if stats is None:
        raise ValueError("no features to accumulate CMVN statistics from")
    return stats


def apply(feats: np.ndarray, stats: np.ndarray, norm_vars: bool = True) -> np.ndarray:
    """Normalise like Kaldi's apply-cmvn: subtract the mean, optionally divide by the std."""
    count = stats[0, -1]
    if count < 1:
        raise ValueError("CMVN statistics with zero frame count")
    mean = stats[0, :-1] / count
    out = feats - mean
    if norm_vars:
        var = np.maximum(stats[1, :-1] / count - mean * mean, VARIANCE_FLOOR)
        out = out / np.sqrt(var)
    return out.astype(np.float32)


def cmvn_key(unit: str, utt: str, speaker: str | None) -> str:
    """The statistics' key of `utt` (of `speaker`) under `unit`."""
    if unit == "utterance":
        return utt
    if unit == "speaker":
        if speaker is None:
            raise KeyError(utt)  # no speaker in utt2spk
        return speaker
    return "global"


def compute_stats(
    unit: str, feats: dict[str, np.ndarray] | Callable[[], Iterable[tuple[str, np.ndarray]]], utt2spk: dict[str, str]
) -> dict[str, np.ndarray]:
    """Statistics per normalisation unit from (utt, matrix) pairs."""
    if unit not in UNITS:
        raise ValueError(f"unknown CMVN unit {unit!r}; choose one of {UNITS}")
    items = feats.items() if isinstance(feats, dict) else feats()
    grouped: dict[str, np.ndarray] = {}
    for utt, mat in items:
        key = cmvn_key(unit, utt, utt2spk.get(utt))
        s = accumulate([mat])
        grouped[key] = grouped[key] + s if key in grouped else s
    return grouped


def write_stats(stats: dict[str, np.ndarray], set_dir: str | os.PathLike, unit: str) -> None:
    """Write cmvn.ark/cmvn.scp (Kaldi-readable) and the cmvn_type record into `set_dir`."""
    set_dir = Path(set_dir)
    with kaldiio.WriteHelper(f"ark,scp:{set_dir / 'cmvn.ark'},{set_dir / 'cmvn.scp'}") as writer:
        for key in sorted(stats, key=lambda k: k.encode()):
            writer(key, stats[key])
    (set_dir / "cmvn_type").write_text(unit + "\n")


class Cmvn:
    """Normalises an utterance's features with statistics keyed by its CMVN unit."""

    def __init__(self, unit: str, stats: dict[str, np.ndarray], utt2spk: dict[str, str], norm_vars: bool = True):
        if unit not in UNITS:
            raise ValueError(f"unknown CMVN unit {unit!r}; choose one of {UNITS}")
        self.unit, self.stats, self.utt2spk, self.norm_vars = unit, stats, utt2spk, norm_vars

    def __call__(self, utt: str, feats: np.ndarray, speaker: str | None = None) -> np.ndarray:
        """`speaker` names the utterance's speaker where utt2spk was not given (a streaming reader)."""
        if self.unit == "none":
            return np.array(feats, dtype=np.float32)  # a copy: kaldiio may hand out read-only memory
        key = cmvn_key(self.unit, utt, self.utt2spk.get(utt) if speaker is None else speaker)
        if key not in self.stats:
            raise InputError(f"no CMVN statistics for {key!r} ({self.unit}); re-run the features stage")
        return apply(feats, self.stats[key], self.norm_vars)


def read_stats(scp: str | os.PathLike) -> dict[str, np.ndarray]:
    """A cmvn.scp (ours or Kaldi's): key -> 2 x (D+1) statistics."""
    scp = Path(scp)
    if not scp.is_file():
        raise InputError(f"{scp}: missing CMVN statistics; re-run the features stage")
    try:
        return {k: np.asarray(v) for k, v in commands.load_scp(scp).items()}
    except InputError:
        raise
    except Exception as err:  # kaldiio asserts, or raises assorted errors, on a truncated ark
        raise InputError(
            f"{scp.parent / 'cmvn.ark'}: unreadable CMVN statistics ({error_detail(err)}); "
            f"delete {scp.parent} and re-run the features stage"
        ) from None


class CmvnApplier(Cmvn):
    """Normalises an utterance's features with the statistics stored beside them."""

    def __init__(self, set_dir: str | os.PathLike, utt2spk: dict[str, str], norm_vars: bool = True):
        set_dir = Path(set_dir)
        type_file = set_dir / "cmvn_type"
        unit = type_file.read_text().strip() if type_file.is_file() else "none"
        if unit not in UNITS:
            raise InputError(f"{type_file}: unknown CMVN unit {unit!r}; expected one of {UNITS}")
        stats = read_stats(set_dir / "cmvn.scp") if unit != "none" else {}
        super().__init__(unit, stats, utt2spk, norm_vars)


def add_stats(total: dict[str, np.ndarray], stats: dict[str, np.ndarray]) -> None:
    """Add CMVN statistics (per speaker, utterance or 'global') into `total`, key by key."""
    for key, value in stats.items():
        total[key] = total[key] + value if key in total else value


def merge_stats(parts) -> dict[str, np.ndarray]:
    """CMVN statistics of all parts (a speaker's utterances may lie in several)."""
    total: dict[str, np.ndarray] = {}
    for stats in parts:
        add_stats(total, stats)
    return total
