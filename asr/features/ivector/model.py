"""The i-vector extractor of the i-vector feature recipes, trained without transcripts on the
training set's log-mel frames, the way Kaldi's online/hybrid recipes and `sid/` scripts do:

  front end   raw log-mel spliced +-3, then PCA to 40 dimensions with normalised mean and
              variance (steps/online/nnet2/get_pca_transform.sh); no CMN, so the i-vector
              carries the speaker's and the channel's offsets (what the network is given it for)
  diag UBM    512 diagonal Gaussians from one by splitting, EM (asr.features.gmm)
  full UBM    4 EM iterations with full covariances, 20 components per frame selected by the
              diagonal UBM (sid/train_full_ubm.sh; asr.features.ivector.full_gmm)
  extractor   100-dimensional, 10 EM iterations on every training speaker's statistics (every
              2nd frame, as Kaldi's --subsample 2), with posteriors from the full UBM (gselect
              20, pruned below 0.025, scaled by 0.1) (asr.features.ivector.extractor)

The UBMs train on `ubm_frames` frames, an equal share of every speaker's; the
extractor's statistics come from all training frames, the speakers split over
`features.jobs` worker processes (one torch thread each, on `features.device`).

Saved in `<feats_dir>/<name>/extractor/` as Kaldi files, so that Kaldi computes the same
offline i-vectors with

    splice-feats $(cat splice_opts) scp:feats.scp ark:- | transform-feats final.mat ark:- ark:feats.ark
    gmm-gselect --n=20 final.dubm ark:feats.ark ark:- |
      fgmm-global-gselect-to-post --min-post=0.025 final.ubm ark:feats.ark ark:- ark:- |
      scale-post ark:- 0.1 ark:- | ivector-extract --max-count=100 final.ie ark:feats.ark ark:- ark:ivectors.ark

  final.mat, splice_opts   the PCA front end (d x (spliced dim + 1))
  final.dubm, final.ubm    the diagonal and full UBMs
  final.ie                 the extractor
  ivector_extractor.conf   --num-gselect, --min-post, --posterior-scale (what extraction must match)
  report.json              training diagnostics (UBM and extractor objectives per iteration)
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import kaldiio
import numpy as np
import torch

from asr.features.ivector import extractor as iv
from asr.features.pool import run_parts, single_thread
from asr.features.ivector.full_gmm import FullGmm, train_full_ubm
from asr.features.gmm import DiagGmm, train_gmm
from asr.kaldi.matrix import read_matrix, write_matrix
from asr.features.ivector.pca import estimate_pca
from asr.features.splice import splice, splice_opts
from asr.features.subset import speaker_subset, speaker_utterances, split_speakers
from asr.kaldi.table import c_sort_key
from asr.utils.atomic import write_text
from asr.utils.errors import InputError
from asr.utils.record import verify

log = logging.getLogger("asr.features")

CONF_FILE = "ivector_extractor.conf"


@dataclass
class IvectorModel:
    splice_left: int
    splice_right: int
    pca: np.ndarray  # (d, D * (L + 1 + R) + 1)
    ubm: iv.Ubm
    extractor: iv.IvectorExtractor | None = None

    def frames(self, logmel: np.ndarray) -> torch.Tensor:
        """Raw log-mel frames (T, D) -> the extractor's input (T, d), float64 (the product in
        torch, whose threads the caller controls)."""
        spliced = torch.from_numpy(splice(np.asarray(logmel, dtype=np.float64), self.splice_left, self.splice_right))
        pca = torch.from_numpy(self.pca)
        return torch.addmm(pca[:, -1], spliced, pca[:, :-1].T).to(self.ubm.full.means.device)

    def save(self, out_dir: str | os.PathLike) -> None:
        out_dir = Path(out_dir)
        write_matrix(out_dir / "final.mat", self.pca)
        write_text(out_dir / "splice_opts", splice_opts(self.splice_left, self.splice_right))
        self.ubm.diag.save(out_dir / "final.dubm")
        self.ubm.full.save(out_dir / "final.ubm")
        write_text(
            out_dir / CONF_FILE,
            f"--num-gselect={self.ubm.num_gselect}\n--min-post={self.ubm.min_post}\n"
            f"--posterior-scale={self.ubm.posterior_scale}\n",
        )
        if self.extractor is not None:
            self.extractor.save(out_dir / "final.ie")

    @classmethod
    def load(
        cls, model_dir: str | os.PathLike, device: str | torch.device = "cpu", with_extractor: bool = True
    ) -> "IvectorModel":
        model_dir = Path(model_dir)
        for name in ("final.mat", "splice_opts", "final.dubm", "final.ubm", "final.ie", CONF_FILE):
            verify(model_dir / name, "i-vector extractor file")
        try:
            context = _options(model_dir / "splice_opts")
            options = _options(model_dir / CONF_FILE)
            ubm = iv.Ubm(
                DiagGmm.load(model_dir / "final.dubm", device),
                FullGmm.load(model_dir / "final.ubm", device),
                int(options["num-gselect"]),
                float(options["min-post"]),
                float(options["posterior-scale"]),
            )
            left, right = int(context["left-context"]), int(context["right-context"])
        except (OSError, KeyError, ValueError) as err:
            raise InputError(
                f"{model_dir}: i-vector extractor files missing or unreadable ({err}); re-run the features stage"
            ) from None
        extractor = iv.IvectorExtractor.load(model_dir / "final.ie", device) if with_extractor else None
        return cls(left, right, read_matrix(model_dir / "final.mat"), ubm, extractor)


def _options(path: Path) -> dict[str, str]:
    return dict(o.lstrip("-").split("=", 1) for o in path.read_text().split() if "=" in o)


class LogmelFrames:
    """Raw log-mel frames of one feature set directory, read on demand."""

    def __init__(self, base_dir: str | os.PathLike):
        self.base_dir = Path(base_dir)
        self.feats = kaldiio.load_scp(str(self.base_dir / "feats.scp"))

    def __call__(self, utt: str) -> np.ndarray:
        try:
            return np.asarray(self.feats[utt])
        except Exception as err:
            raise InputError(
                f"{self.base_dir / 'feats.scp'}: cannot read {utt!r} ({err}); re-run the features stage"
            ) from None


# --------------------------------------------------------------------- training


def train_ivector_model(
    base_dir: Path,
    utt2spk: dict[str, str],
    num_frames: dict[str, int],
    cfg: Any,
    out_dir: Path,
    device: str = "cpu",
    jobs: int = 1,
) -> dict:
    """Train the model on a log-mel set into `out_dir` (a temporary directory the caller
    renames); returns the training report. `cfg` is a features.ivector config."""
    report: dict[str, Any] = {}
    started = time.perf_counter()
    logmel = LogmelFrames(base_dir)
    subset = speaker_subset(num_frames, utt2spk, cfg.ubm_frames)
    spliced = np.concatenate(
        [
            splice(logmel(u)[: subset.frames_of[u]].astype(np.float64), cfg.splice_left, cfg.splice_right)
            for u in subset.utts
        ]
    )
    if spliced.shape[0] < 2 * cfg.num_components:
        raise InputError(
            f"{base_dir}: {spliced.shape[0]} training frames, fewer than the {2 * cfg.num_components} that "
            f"{cfg.num_components} Gaussians need; lower features.ivector.num_components"
        )
    pca, eigenvalues = estimate_pca(spliced, cfg.pca_dim)
    projection = torch.from_numpy(pca)
    x = torch.addmm(projection[:, -1], torch.from_numpy(spliced), projection[:, :-1].T).to(device)
    del spliced
    diag, diag_report = train_gmm(x, cfg.num_components, final_iters=cfg.diag_iters, device=device)
    with single_thread():  # many small products: a second thread only synchronises
        full, full_report = train_full_ubm(diag, x, cfg.full_iters, cfg.num_gselect)
    del x
    ubm = iv.Ubm(diag, full, cfg.num_gselect, cfg.min_post, cfg.posterior_scale)
    model = IvectorModel(cfg.splice_left, cfg.splice_right, pca, ubm)
    model.save(out_dir)  # the workers read the front end and the UBMs from here
    report["ubm"] = {
        "utterances": len(subset.utts),
        "frames": subset.total_frames,
        "pca_eigenvalues": [round(float(v), 4) for v in eigenvalues[: cfg.pca_dim + 1]],
        "diag_loglike_per_frame": diag_report.loglike_per_frame[-cfg.diag_iters :],
        "full_loglike_per_frame": full_report.loglike_per_frame,
        "seconds": round(time.perf_counter() - started, 1),
    }
    log.info(
        "i-vector UBMs: %d diagonal then full Gaussians on %d frames; full UBM log-likelihood %.3f -> %.3f per frame",
        cfg.num_components,
        report["ubm"]["frames"],
        full_report.loglike_per_frame[0],
        full_report.loglike_per_frame[-1],
    )
    started = time.perf_counter()
    speakers = speaker_utterances(num_frames, utt2spk)
    stats = training_stats(out_dir, base_dir, speakers, num_frames, cfg.train_subsample, device, jobs)
    extractor = iv.IvectorExtractor.init_from_ubm(full, cfg.dim, cfg.seed).to(device)
    iterations: list[iv.EmIteration] = []
    with single_thread():  # batched small factorisations (C of D x D, S of R x R): threads only synchronise
        extractor = iv.train_extractor(
            extractor, stats, cfg.em_iters, cfg.min_count, cfg.variance_floor_factor, iterations
        )
        final = iv.final_auxiliary(extractor, stats)
    model.extractor = extractor
    extractor.save(out_dir / "final.ie")
    report["extractor"] = {
        "speakers": len(speakers),
        "frames": int(sum(num_frames.values())),
        "count": round(stats.frames, 1),
        "ivector_dim": cfg.dim,
        "prior_offset": extractor.prior_offset,
        "auxiliary_per_frame": [round(i.auxiliary_per_frame, 5) for i in iterations] + [round(final, 5)],
        "floored_eigenvalues": [i.floored_eigenvalues for i in iterations],
        "skipped_components": iterations[-1].skipped_components if iterations else 0,
        "seconds": round(time.perf_counter() - started, 1),
    }
    log.info(
        "i-vector extractor: %d EM iterations on %d speakers, objective %.4f -> %.4f per (scaled) frame",
        cfg.em_iters,
        len(speakers),
        report["extractor"]["auxiliary_per_frame"][0],
        final,
    )
    return report


def training_stats(
    model_dir: Path,
    base_dir: Path,
    speakers: dict[str, list[str]],
    num_frames: dict[str, int],
    subsample: int,
    device: str,
    jobs: int,
) -> iv.TrainingStats:
    """Every training speaker's statistics (one session per speaker) from every `subsample`-th
    frame, posteriors scaled up by as much (Kaldi's --subsample), in `jobs` processes."""
    parts = split_speakers(speakers, num_frames, jobs)
    tasks = [StatsTask(str(model_dir), str(base_dir), part, subsample, device) for part in parts]
    results = run_parts(tasks, desc="i-vector stats", total=len(speakers), work=speaker_stats_part, unit="spk")
    by_speaker = {spk: stats for result in results for spk, stats in result.sessions.items()}
    order = sorted(by_speaker, key=c_sort_key)
    counts = torch.stack([torch.from_numpy(by_speaker[s][0]) for s in order]).to(device)
    first = torch.stack([torch.from_numpy(by_speaker[s][1]) for s in order]).to(device)
    second = sum(torch.from_numpy(r.second) for r in results).to(device)
    return iv.TrainingStats(counts, first, second)


@dataclass
class StatsTask:
    model_dir: str
    base_dir: str
    speakers: dict[str, list[str]]
    subsample: int
    device: str


@dataclass
class StatsResult:
    sessions: dict[str, tuple[np.ndarray, np.ndarray]]  # speaker -> counts (C,), first order (C, D)
    second: np.ndarray  # (C, D, D) summed over the part's frames


def speaker_stats_part(task: StatsTask, on_speaker_done: Callable[[], None]) -> StatsResult:
    with single_thread():
        model = IvectorModel.load(task.model_dir, task.device, with_extractor=False)
        logmel = LogmelFrames(task.base_dir)
        c, d = model.ubm.full.num_components, model.ubm.full.dim
        sessions, second = {}, torch.zeros(c, d, d, dtype=torch.float64, device=task.device)
        for speaker, utts in task.speakers.items():
            x = torch.cat([model.frames(logmel(u))[:: task.subsample] for u in utts])  # spliced per utterance
            indices, weights = model.ubm.posteriors(x)
            weights *= task.subsample
            counts, first = iv.zeroth_first_order(x, indices, weights, c)
            sessions[speaker] = (counts[0].cpu().numpy(), first[0].cpu().numpy())
            second += iv.second_order(x, indices, weights, c)
            on_speaker_done()
        return StatsResult(sessions, second.cpu().numpy())


def write_report(path: str | os.PathLike, report: dict) -> None:
    write_text(path, json.dumps(report, indent=1) + "\n")
