"""The speaker-adaptation model of the fMLLR recipes: per-speaker CMN of log-mel frames,
splicing, the LDA+MLLT projection and the GMM that fMLLR adapts towards.

Trained without transcripts on the training set (asr.features.lda_mllt), followed by
speaker-adaptive training (SAT): fMLLR transforms of the training speakers, then EM on the
adapted frames, so the GMM models speaker-normalised features as in Kaldi's train_sat.sh.

Saved as Kaldi files in `<feats_dir>/<name>/gmm/`, so Kaldi reproduces the projection with

    apply-cmvn --norm-vars=false --utt2spk=ark:utt2spk scp:cmvn.scp scp:feats.scp ark:- |
      splice-feats $(cat splice_opts) ark:- ark:- | transform-feats final.mat ark:- ark:- |
      transform-feats --utt2spk=ark:utt2spk scp:trans.scp ark:- ark:-

  final.mat     LDA+MLLT matrix (d x spliced dim; absent when features.fmllr.lda=false)
  final.dubm    the GMM (Kaldi DiagGmm)
  splice_opts   --left-context=L --right-context=R
  cmvn_opts     --norm-means=true --norm-vars=false (per speaker)
  report.json   training diagnostics (LDA eigenvalues, log-likelihoods, SAT)
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import kaldiio
import numpy as np
import torch

from asr.features import gmm as gmm_lib
from asr.features.cmvn import CmvnApplier
from asr.features.pool import run_parts, single_thread
from asr.features.fmllr.transform import FmllrResult, estimate_fmllr, transform_frames
from asr.features.gmm import CHUNK_FRAMES, DiagGmm
from asr.kaldi.matrix import read_matrix, write_matrix
from asr.features.lda_mllt import train_front_end
from asr.features.splice import SplicedBlocks, splice, splice_opts
from asr.features.subset import FrameSubset, split_speakers
from asr.kaldi import commands
from asr.kaldi.table import c_sort_key, iter_table
from asr.utils.atomic import write_text
from asr.utils.errors import InputError
from asr.utils.record import verify

log = logging.getLogger("asr.features")


@dataclass
class FmllrModel:
    splice_left: int
    splice_right: int
    matrix: np.ndarray | None  # (d, D * (L + 1 + R)) LDA+MLLT, or None: frames used as they are
    gmm: DiagGmm
    norm_vars: bool = False  # of the per-speaker CMVN before splicing

    @property
    def dim(self) -> int:
        return self.gmm.dim

    def project(self, normalised: np.ndarray) -> np.ndarray:
        """CMVN'd log-mel frames (T, D) -> the GMM's space (T, d), float64."""
        if self.matrix is None:
            return np.asarray(normalised, dtype=np.float64)
        spliced = splice(np.asarray(normalised, dtype=np.float64), self.splice_left, self.splice_right)
        return spliced @ self.matrix.T

    def save(self, out_dir: str | os.PathLike) -> None:
        out_dir = Path(out_dir)
        if self.matrix is not None:
            write_matrix(out_dir / "final.mat", self.matrix)
        self.gmm.save(out_dir / "final.dubm")
        write_text(out_dir / "splice_opts", splice_opts(self.splice_left, self.splice_right))
        write_text(out_dir / "cmvn_opts", f"--norm-means=true --norm-vars={'true' if self.norm_vars else 'false'}\n")

    @classmethod
    def load(cls, model_dir: str | os.PathLike, device: str | torch.device = "cpu") -> "FmllrModel":
        model_dir = Path(model_dir)
        for name in ("final.mat", "final.dubm", "splice_opts", "cmvn_opts"):
            verify(model_dir / name, "fMLLR model file")
        try:
            opts = dict(o.lstrip("-").split("=") for o in (model_dir / "splice_opts").read_text().split())
            norm_vars = "--norm-vars=true" in (model_dir / "cmvn_opts").read_text()
            left, right = int(opts["left-context"]), int(opts["right-context"])
        except (OSError, KeyError, ValueError) as err:
            raise InputError(
                f"{model_dir}: splice_opts/cmvn_opts missing or unreadable ({err}); re-run the features stage"
            ) from None
        matrix = read_matrix(model_dir / "final.mat") if (model_dir / "final.mat").is_file() else None
        return cls(left, right, matrix, DiagGmm.load(model_dir / "final.dubm", device), norm_vars)


# ------------------------------------------------------------------------- data


def speaker_cmvn(base_dir: Path, utt2spk: dict[str, str], norm_vars: bool) -> CmvnApplier:
    """The per-speaker CMVN of a log-mel set (what the fMLLR recipe normalises with)."""
    applier = CmvnApplier(base_dir, utt2spk, norm_vars)
    if applier.unit not in ("speaker", "none"):
        raise InputError(f"{base_dir}/cmvn_type: {applier.unit}; the fMLLR recipe needs per-speaker statistics")
    return applier


def read_logmel(base_dir: Path, utt: str, entry: str) -> np.ndarray:
    """The log-mel matrix of `utt` at its feats.scp `entry` in the set `base_dir`."""
    try:
        return np.asarray(kaldiio.load_mat(entry))
    except Exception as err:
        raise InputError(f"{base_dir / 'feats.scp'}: cannot read {utt!r} ({err}); re-run the features stage") from None


class SpeakerFrames:
    """Per-speaker CMVN'd log-mel frames of the utterances of `utt2spk` in one feature set
    directory, read on demand (only their feats.scp entries are held)."""

    def __init__(self, base_dir: str | os.PathLike, utt2spk: dict[str, str], norm_vars: bool):
        self.base_dir = Path(base_dir)
        scp = self.base_dir / "feats.scp"
        commands.check_table(scp, commands.scp_command)
        self.feats = {utt: entry for _, utt, entry in iter_table(scp) if utt in utt2spk}
        self.utt2spk = utt2spk
        self.cmvn = speaker_cmvn(self.base_dir, utt2spk, norm_vars)

    def raw(self, utt: str) -> np.ndarray:
        return read_logmel(self.base_dir, utt, self.feats[utt])

    def normalised(self, utt: str) -> np.ndarray:
        return self.cmvn(utt, self.raw(utt))

    def speakers(self, utts: list[str] | None = None) -> dict[str, list[str]]:
        """speaker -> its utterances (those with features), C-sorted."""
        out: dict[str, list[str]] = {}
        for utt in sorted(utts if utts is not None else self.feats.keys(), key=c_sort_key):
            if utt in self.utt2spk:
                out.setdefault(self.utt2spk[utt], []).append(utt)
        return out


# --------------------------------------------------------------------- training


def train_fmllr_model(
    frames: SpeakerFrames, subset: FrameSubset, cfg: Any, device: str = "cpu", jobs: int = 1
) -> tuple[FmllrModel, dict]:
    """The model from the log-mel frames of `subset` (the training set's `streamed_subset` for
    cfg.max_train_frames); `cfg` is a features.fmllr config. The SAT speakers' fMLLR estimates
    are split over `jobs` worker processes."""
    utts = subset.utts
    by_speaker = frames.speakers(utts)
    # copies: a view of a speaker's cut last utterance would keep the whole utterance alive
    normalised = {u: frames.normalised(u)[: subset.frames_of[u]].copy() for u in utts}
    base = torch.from_numpy(np.concatenate([normalised[u] for u in utts]))
    needed = 2 * cfg.num_components
    if base.shape[0] < needed:
        raise InputError(
            f"{frames.base_dir}: {base.shape[0]} training frames, fewer than the {needed} that "
            f"{cfg.num_components} Gaussians need; lower features.fmllr.num_components"
        )
    report: dict[str, Any] = {
        "train_utterances": len(utts),
        "train_frames": int(base.shape[0]),
        "speakers": len(by_speaker),
    }
    log.info(
        "fMLLR model: %d frames, an equal share of each of %d speakers (min_count %g)",
        base.shape[0],
        len(by_speaker),
        cfg.min_count,
    )
    if cfg.lda:
        spliced = SplicedBlocks([normalised[u] for u in utts], cfg.splice_left, cfg.splice_right, CHUNK_FRAMES)
        front = train_front_end(
            base.to(device),
            spliced,
            cfg.dim,
            cfg.num_components,
            cfg.mllt_iters,
            final_iters=cfg.em_iters,
            var_floor_ratio=cfg.var_floor_ratio,
        )
        model = FmllrModel(cfg.splice_left, cfg.splice_right, front.matrix, front.gmm, cfg.base_norm_vars)
        report["lda_eigenvalues"] = [round(float(v), 4) for v in front.lda_eigenvalues[: cfg.dim + 1]]
        report["gmm_loglike_per_frame"] = front.loglike_per_frame
    else:
        gmm, em_report = gmm_lib.train_gmm(
            base, cfg.num_components, final_iters=cfg.em_iters, var_floor_ratio=cfg.var_floor_ratio, device=device
        )
        model = FmllrModel(0, 0, None, gmm, cfg.base_norm_vars)
        report["gmm_loglike_per_frame"] = em_report.loglike_per_frame
    del base
    report["sat"] = speaker_adaptive_training(model, by_speaker, normalised, cfg, jobs)
    return model, report


def speaker_adaptive_training(
    model: FmllrModel, by_speaker: dict[str, list[str]], normalised: dict[str, np.ndarray], cfg: Any, jobs: int = 1
) -> list[dict]:
    """`cfg.sat_iters` rounds of: fMLLR per training speaker (split over `jobs` processes),
    then EM on the adapted frames."""
    with tempfile.TemporaryDirectory(prefix="sat.") as tmp:
        projected = SatFrames.write(Path(tmp) / "projected.npy", model, by_speaker, normalised)
        parts = split_speakers({spk: [spk] for spk in projected.rows}, projected.sizes(), jobs)
        return [sat_round(model, projected, parts, cfg, number) for number in range(1, cfg.sat_iters + 1)]


def sat_round(model: FmllrModel, projected: "SatFrames", parts: list[list[str]], cfg: Any, number: int) -> dict:
    """fMLLR for every speaker, then EM on the adapted frames (round `number`); its report."""
    gmm = SatGmm.of(model.gmm)
    tasks = [SatTask(gmm, projected.subset(part), FmllrOptions.from_config(cfg)) for part in parts]
    results = {
        spk: r
        for part in run_parts(tasks, desc="SAT speakers", total=len(projected.rows), work=estimate_part, unit="spk")
        for spk, r in part.items()
    }
    frames = model.gmm.means.new_empty(projected.total, model.dim)  # adapted in place, speaker by speaker
    for spk, (start, end) in projected.rows.items():
        frames[start:end] = transform_frames(torch.from_numpy(projected.of(spk)).to(frames), results[spk].transform)
    em_report = gmm_lib.EmReport()
    floor = gmm_lib.variance_floor(frames, cfg.var_floor_ratio)
    model.gmm = gmm_lib.em(model.gmm, frames, cfg.em_iters, floor, em_report)
    updated = sum(r.updated for r in results.values())
    gains = [r.objective[-1] - r.objective[0] for r in results.values()]
    report = {
        "speakers_adapted": updated,
        "speakers": len(results),
        "mean_objective_gain_per_frame": float(np.mean(gains)) if gains else 0.0,
        "mean_em_iterations": float(np.mean([len(r.objective) - 1 for r in results.values() if r.updated] or [0])),
        "gmm_loglike_per_frame": em_report.loglike_per_frame,
    }
    log.info(
        "SAT round %d: %d of %d speakers adapted, objective +%.3f per frame; GMM log-likelihood %.3f -> %.3f",
        number,
        updated,
        len(results),
        report["mean_objective_gain_per_frame"],
        em_report.loglike_per_frame[0],
        em_report.loglike_per_frame[-1],
    )
    return report


# ------------------------------------------------------------- SAT worker parts


@dataclass
class FmllrOptions:
    """How each fMLLR estimate runs (features.fmllr.*), as plain values for worker processes."""

    iters: int
    passes: int
    tolerance: float
    min_count: float

    @classmethod
    def from_config(cls, cfg: Any) -> "FmllrOptions":
        return cls(cfg.fmllr_iters, cfg.fmllr_passes, cfg.fmllr_tolerance, cfg.min_count)

    def estimate(self, gmm: DiagGmm, x: torch.Tensor | np.ndarray) -> FmllrResult:
        return estimate_fmllr(gmm, x, self.iters, self.passes, self.min_count, tolerance=self.tolerance)


@dataclass
class SatGmm:
    """A DiagGmm as numpy arrays (what a worker process is sent)."""

    weights: np.ndarray
    means: np.ndarray
    variances: np.ndarray
    device: str

    @classmethod
    def of(cls, gmm: DiagGmm) -> "SatGmm":
        return cls(*(t.detach().cpu().numpy() for t in (gmm.weights, gmm.means, gmm.variances)), str(gmm.means.device))

    def gmm(self) -> DiagGmm:
        return DiagGmm(*(torch.from_numpy(a).to(self.device) for a in (self.weights, self.means, self.variances)))


@dataclass
class SatFrames:
    """The SAT speakers' frames in the GMM's space, end to end in one float64 .npy file, which
    worker processes map instead of being sent pickled copies (a transient of twice the frames
    in the main process) and the main process reads speaker by speaker."""

    path: str
    rows: dict[str, tuple[int, int]]  # speaker -> its rows [start, end)

    @classmethod
    def write(
        cls, path: Path, model: FmllrModel, by_speaker: dict[str, list[str]], normalised: dict[str, np.ndarray]
    ) -> "SatFrames":
        rows, total = {}, 0
        for spk, utts in by_speaker.items():
            rows[spk] = (total, total + sum(normalised[u].shape[0] for u in utts))
            total = rows[spk][1]
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(total, model.dim))
        for spk, utts in by_speaker.items():
            start = rows[spk][0]
            for utt in utts:
                out[start : start + normalised[utt].shape[0]] = model.project(normalised[utt])
                start += normalised[utt].shape[0]
        out.flush()
        del out
        return cls(str(path), rows)

    @property
    def total(self) -> int:
        return max((end for _, end in self.rows.values()), default=0)

    def sizes(self) -> dict[str, int]:
        return {spk: end - start for spk, (start, end) in self.rows.items()}

    def subset(self, speakers: list[str]) -> "SatFrames":
        return SatFrames(self.path, {spk: self.rows[spk] for spk in speakers})

    def of(self, speaker: str) -> np.ndarray:
        start, end = self.rows[speaker]
        return np.array(np.load(self.path, mmap_mode="r")[start:end])


@dataclass
class SatTask:
    gmm: SatGmm
    frames: SatFrames  # of the part's speakers
    options: FmllrOptions


def estimate_part(task: SatTask, on_speaker_done: Callable[[], None]) -> dict[str, FmllrResult]:
    """fMLLR estimates of one part's speakers (one torch thread: parallelism is across parts)."""
    gmm = task.gmm.gmm()
    results = {}
    with single_thread():
        for speaker in task.frames.rows:
            results[speaker] = task.options.estimate(gmm, task.frames.of(speaker))
            on_speaker_done()
    return results


def write_report(path: str | os.PathLike, report: dict) -> None:
    write_text(path, json.dumps(report, indent=1) + "\n")
