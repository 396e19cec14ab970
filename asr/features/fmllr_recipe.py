"""The fMLLR feature recipes (features.kind = fmllr | fmllr_fbank | fmllr_ivector_fbank).

Per frame the features are
  fmllr         W_s [P splice(CMN_s(x_t)); 1]                       (features.fmllr.dim)
  fmllr_fbank   [ fMLLR as above | x_t | delta x_t | delta^2 x_t ]  (dim + D * (1 + delta_order))
  fmllr_ivector_fbank   [ fMLLR | i-vector | x_t | delta x_t | delta^2 x_t ]  (+ features.ivector.dim)
where x_t is the log-mel frame, CMN_s the speaker's mean normalisation, P the LDA+MLLT matrix
and W_s the speaker's fMLLR transform. For fmllr and fmllr_fbank the log-mel stream is raw (its
CMVN, like that of the whole vector, comes from the statistics stored beside the features, per
`features.cmvn`). For fmllr_ivector_fbank, fMLLR and log-mel are normalised per
`features.cmvn` (speaker or utterance; means, and variances with `features.norm_vars`) before
the i-vector (asr.features.ivector_recipe) goes between them, and the set's cmvn_type is
none: the i-vector is used as it is, and per-speaker statistics would wipe out a per-speaker
i-vector.

Every set, eval included, is adapted the same way: each speaker's transform is estimated
from that speaker's own frames under the GMM, so test-time adaptation is unsupervised and
needs no first-pass decoding.

Layout under <feats_dir>/<name>/:
  fbank/<set>/   the log-mel filterbank (asr.features.extract), with per-speaker CMVN stats
  gmm/           the adaptation model trained on the training set (asr.features.fmllr_model)
  extractor/, ivector/<set>/   (fmllr_ivector_fbank) the i-vector extractor and each set's
                 i-vectors (asr.features.ivector_recipe)
  <set>/         feats.{ark,scp}, utt2num_frames, feat_dim, cmvn.{ark,scp}, cmvn_type,
                 trans.{ark,scp} (per-speaker fMLLR transforms, Kaldi matrices d x (d+1)),
                 fmllr_speakers (per speaker: frames, adapted|identity, log-likelihood per
                 frame before/after, and with log|det A| added before/after), recipe_checksum
Each directory is built under a temporary name and renamed when complete; a re-run skips
the parts whose inputs and options did not change. The speakers of a set are split over
`features.jobs` worker processes (one torch thread each).
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kaldiio
import numpy as np
import torch

from asr.data.datadir import read_data_dir, read_table, spk2utt, write_table
from asr.features import cmvn
from asr.features.deltas import add_deltas
from asr.features.extract import (SetSummary, _add_stats, _log_summary, join_parts, merge_stats, non_finite_problem,
                                  repoint_scp, run_parts)
from asr.features.fbank import FbankOptions
from asr.features.fmllr import transform_frames
from asr.features.fmllr_model import FmllrModel, FmllrOptions, SpeakerFrames, single_thread, train_fmllr_model, write_report
from asr.features.ivector_recipe import IvectorReader, ivector_sets, make_base_sets
from asr.features.kaldi_io import write_transforms
from asr.features.provenance import CHECKSUM_FILE, checksum, complete, plain, source_checksum
from asr.features.subset import split_speakers
from asr.utils.atomic import atomic_dir
from asr.utils.errors import InputError

log = logging.getLogger("asr.features")

KINDS = ("fmllr", "fmllr_fbank", "fmllr_ivector_fbank")
WITH_LOGMEL = ("fmllr_fbank", "fmllr_ivector_fbank")
BAKED_CMVN = ("speaker", "utterance", "none")  # what fmllr_ivector_fbank can normalise before appending
SET_OUTPUTS = ("feats.ark", "feats.scp", "utt2num_frames", "feat_dim", "cmvn_type", "trans.scp", CHECKSUM_FILE)
MODEL_OUTPUTS = ("final.dubm", "splice_opts", "cmvn_opts", "report.json", CHECKSUM_FILE)


def fmllr_dim(feats_cfg: Any) -> int:
    return feats_cfg.fmllr.dim if feats_cfg.fmllr.lda else FbankOptions.from_config(feats_cfg).dim


def feature_dim(feats_cfg: Any) -> int:
    """Per-frame dimension of the recipe's output."""
    logmel = FbankOptions.from_config(feats_cfg).dim * (1 + feats_cfg.delta_order)
    ivector = feats_cfg.ivector.dim if feats_cfg.kind == "fmllr_ivector_fbank" else 0
    return fmllr_dim(feats_cfg) + ivector + (logmel if feats_cfg.kind in WITH_LOGMEL else 0)


def make_fmllr_features(cfg: Any) -> list[SetSummary]:
    """The stage for the fMLLR kinds: log-mel of every set, the model, adapted features."""
    fcfg = cfg.features
    if fcfg.kind not in KINDS:
        raise InputError(f"features.kind={fcfg.kind!r} is not an fMLLR recipe {KINDS}")
    if fcfg.fmllr.lda and fcfg.fmllr.dim > FbankOptions.from_config(fcfg).dim * (fcfg.fmllr.splice_left + 1 + fcfg.fmllr.splice_right):
        raise InputError(f"features.fmllr.dim={fcfg.fmllr.dim} exceeds the spliced log-mel dimension")
    if fcfg.kind == "fmllr_ivector_fbank" and fcfg.cmvn not in BAKED_CMVN:
        raise InputError(f"features.cmvn={fcfg.cmvn!r}: {fcfg.name} normalises fMLLR and log-mel per speaker or per "
                         f"utterance before the i-vector goes between them; choose one of {BAKED_CMVN}")
    root = Path(fcfg.feats_dir) / fcfg.name
    sets = (cfg.data.train_set, cfg.data.dev_set, cfg.data.eval_set)
    make_base_sets(cfg, root)
    model_checksum = ensure_model(root / "gmm", root / "fbank" / cfg.data.train_set,
                                  Path(cfg.data.data_dir) / cfg.data.train_set, fcfg)
    ivectors = ivector_sets(cfg, root, root / "ivector", write_feats=False) if fcfg.kind == "fmllr_ivector_fbank" else {}
    return [adapt_set(root / "gmm", model_checksum, root / "fbank" / s, Path(cfg.data.data_dir) / s, root / s, fcfg,
                      ivectors[s][0] if s in ivectors else None)
            for s in sets]


# ------------------------------------------------------------------------ model


def ensure_model(model_dir: Path, base_dir: Path, data_dir: Path, fcfg: Any) -> str:
    """Train the adaptation model unless `model_dir` holds one made from the same inputs;
    returns the checksum of those inputs (what the adapted sets depend on)."""
    expected = checksum(plain(fcfg.fmllr), source_checksum(base_dir))
    if not fcfg.force and complete(model_dir, MODEL_OUTPUTS, expected):
        log.info("fMLLR model: complete already (%s)", model_dir)
        return expected
    log.info("fMLLR model: training on %s into %s", base_dir, model_dir)
    started = time.perf_counter()
    data = read_data_dir(data_dir)
    frames = SpeakerFrames(base_dir, data.utt2spk, fcfg.fmllr.base_norm_vars)
    num_frames = {u: int(n) for u, n in read_table(base_dir / "utt2num_frames").items()}
    model, report = train_fmllr_model(frames, num_frames, fcfg.fmllr, fcfg.device, fcfg.jobs)
    report["seconds"] = round(time.perf_counter() - started, 1)
    with atomic_dir(model_dir) as tmp:
        model.save(tmp)
        write_report(tmp / "report.json", report)
        (tmp / CHECKSUM_FILE).write_text(expected)
    log.info("fMLLR model: %d Gaussians of dim %d trained in %.1f s", model.gmm.num_components, model.dim, report["seconds"])
    return expected


# -------------------------------------------------------------------------- sets


@dataclass
class AdaptOptions:
    """What a worker needs of the config (plain values, cheap to send to a process)."""

    kind: str
    delta_order: int
    delta_window: int
    cmvn: str
    fmllr: FmllrOptions
    device: str
    norm_vars: bool = True
    ivector_dir: str = ""  # fmllr_ivector_fbank: the set's i-vectors (asr.features.ivector_recipe)

    @classmethod
    def from_config(cls, fcfg: Any, ivector_dir: Path | None = None) -> "AdaptOptions":
        return cls(fcfg.kind, fcfg.delta_order, fcfg.delta_window, fcfg.cmvn, FmllrOptions.from_config(fcfg.fmllr), fcfg.device,
                   fcfg.norm_vars, str(ivector_dir) if ivector_dir is not None else "")

    @property
    def stored_cmvn(self) -> str:
        """The CMVN unit of the statistics stored beside the output: none when it is normalised
        already (fmllr_ivector_fbank: the i-vector in the middle is used as it is)."""
        return "none" if self.kind == "fmllr_ivector_fbank" else self.cmvn


@dataclass
class AdaptTask:
    index: int
    speakers: dict[str, list[str]]  # speaker -> its utterances
    model_dir: str
    base_dir: str
    out_dir: str  # the set's temporary directory; the part writes feats.<index>.{ark,scp} there
    utt2spk: dict[str, str]
    options: AdaptOptions


@dataclass
class AdaptResult:
    num_frames: dict[str, int] = field(default_factory=dict)
    stats: dict[str, np.ndarray] = field(default_factory=dict)  # CMVN statistics of the output
    transforms: dict[str, np.ndarray] = field(default_factory=dict)
    speaker_lines: dict[str, str] = field(default_factory=dict)  # fmllr_speakers
    skipped: dict[str, str] = field(default_factory=dict)  # utt -> why its features were not written


def adapt_set(model_dir: Path, model_checksum: str, base_dir: Path, data_dir: Path, out_dir: Path, fcfg: Any,
              ivector_dir: Path | None = None) -> SetSummary:
    """Per-speaker fMLLR of one set and the recipe's per-frame composition (with the i-vectors
    in `ivector_dir` for fmllr_ivector_fbank), the speakers split over `features.jobs` worker
    processes."""
    if fcfg.kind == "fmllr_ivector_fbank" and ivector_dir is None:
        raise ValueError("fmllr_ivector_fbank needs the set's i-vector directory")
    ivectors = (ivector_dir / CHECKSUM_FILE).read_text() if ivector_dir is not None else ""
    expected = checksum(model_checksum, source_checksum(base_dir), fcfg.kind, fcfg.delta_order, fcfg.delta_window,
                        fcfg.cmvn, plain(fcfg.fmllr), ivectors, fcfg.norm_vars if ivectors else None)
    if not fcfg.force and complete(out_dir, SET_OUTPUTS, expected):
        log.info("%s: complete already (%s), skipping; features.force=true recomputes it", out_dir.name, out_dir)
        return SetSummary(out_dir.name, 0, 0, 0.0, 0.0, 0, skipped=True)
    started = time.perf_counter()
    utt2spk = read_data_dir(data_dir).utt2spk
    num_frames = {u: int(n) for u, n in read_table(base_dir / "utt2num_frames").items()}
    speakers = spk2utt({u: s for u, s in utt2spk.items() if u in num_frames})
    if not speakers:
        raise InputError(f"{base_dir}: no features to adapt; check the filterbank stage's log")
    parts = split_speakers(speakers, num_frames, fcfg.jobs)
    log.info("%s: fMLLR for %d speakers in %d part(s) into %s", out_dir.name, len(speakers), len(parts), out_dir)
    options = AdaptOptions.from_config(fcfg, ivector_dir)
    with atomic_dir(out_dir) as tmp:
        tasks = [AdaptTask(i, part, str(model_dir), str(base_dir), str(tmp), utt2spk, options) for i, part in enumerate(parts)]
        results = run_parts(tasks, desc=out_dir.name, total=len(speakers), work=adapt_part, unit="spk")
        join_parts(tmp, out_dir, len(parts))
        summary = _finish_set(results, tmp, out_dir, base_dir, fcfg, options.stored_cmvn, expected)
    summary.wall_seconds = time.perf_counter() - started
    summary.seconds = summary.frames * fcfg.frame_shift_ms / 1000.0  # one frame per shift
    _log_summary(summary)
    return summary


def adapt_part(task: AdaptTask, on_speaker_done) -> AdaptResult:
    """One part's speakers: transforms and composed features into feats.<index>.{ark,scp}."""
    with single_thread():
        return _adapt_part(task, on_speaker_done)


def _adapt_part(task: AdaptTask, on_speaker_done) -> AdaptResult:
    opts = task.options
    model = FmllrModel.load(task.model_dir, opts.device)
    frames = SpeakerFrames(task.base_dir, task.utt2spk, model.norm_vars)
    ivectors = IvectorReader(opts.ivector_dir) if opts.ivector_dir else None
    result = AdaptResult()
    out = Path(task.out_dir)
    with kaldiio.WriteHelper(f"ark,scp:{out / f'feats.{task.index}.ark'},{out / f'feats.{task.index}.scp'}") as writer:
        for speaker, utts in task.speakers.items():
            for utt, feats in adapt_speaker(model, frames, speaker, utts, opts, result, ivectors):
                problem = non_finite_problem(feats)
                if problem:
                    result.skipped[utt] = problem
                    continue
                writer(utt, feats)
                result.num_frames[utt] = feats.shape[0]
                if opts.stored_cmvn != "none":
                    _add_stats(result.stats, cmvn.compute_stats(opts.stored_cmvn, {utt: feats}, task.utt2spk))
            on_speaker_done()
    return result


def adapt_speaker(model: FmllrModel, frames: SpeakerFrames, speaker: str, utts: list[str], opts: AdaptOptions,
                  result: AdaptResult, ivectors: IvectorReader | None = None) -> list[tuple[str, np.ndarray]]:
    """(utt, composed features) for one speaker; its transform and diagnostics go to `result`."""
    raw = [frames.raw(u) for u in utts]
    projected = [model.project(frames.cmvn(u, r)) for u, r in zip(utts, raw)]
    device = model.gmm.means.device
    fmllr = opts.fmllr.estimate(model.gmm, torch.from_numpy(np.concatenate(projected)).to(device))
    result.transforms[speaker] = fmllr.transform
    result.speaker_lines[speaker] = (f"{fmllr.count:.0f} {'adapted' if fmllr.updated else 'identity'} "
                                     f"{fmllr.loglike_before:.4f} {fmllr.loglike_after:.4f} "
                                     f"{fmllr.objective[0]:.4f} {fmllr.objective[-1]:.4f}")
    out = []
    for utt, r, z in zip(utts, raw, projected):
        adapted = transform_frames(torch.from_numpy(z), fmllr.transform).numpy().astype(np.float32)
        if opts.kind in WITH_LOGMEL:
            logmel = add_deltas(r, opts.delta_order, opts.delta_window) if opts.delta_order > 0 else r
            adapted = np.concatenate([adapted, logmel.astype(np.float32)], axis=1)
        out.append((utt, adapted))
    if opts.kind == "fmllr_ivector_fbank":
        assert ivectors is not None
        out = [(utt, insert_ivectors(feats, ivectors(utt, feats.shape[0]), fmllr.transform.shape[0]))
               for utt, feats in normalised(out, opts.cmvn, opts.norm_vars)]
    return out


def normalised(feats: list[tuple[str, np.ndarray]], unit: str, norm_vars: bool) -> list[tuple[str, np.ndarray]]:
    """One speaker's utterances normalised as the training reader would with statistics per
    `unit` (speaker | utterance | none)."""
    if unit == "none":
        return feats
    if unit == "speaker":
        stats = cmvn.accumulate(f for _, f in feats)
        return [(utt, cmvn.apply(f, stats, norm_vars)) for utt, f in feats]
    return [(utt, cmvn.apply(f, cmvn.accumulate([f]), norm_vars)) for utt, f in feats]


def insert_ivectors(acoustic: np.ndarray, ivectors: np.ndarray, position: int) -> np.ndarray:
    """[acoustic[:, :position] | i-vectors | acoustic[:, position:]] per frame, float32."""
    return np.concatenate([acoustic[:, :position], ivectors, acoustic[:, position:]], axis=1).astype(np.float32)


def _finish_set(results: list[AdaptResult], tmp: Path, out_dir: Path, base_dir: Path, fcfg: Any, cmvn_unit: str,
                expected: str) -> SetSummary:
    """Everything beside the joined features: transforms, frame counts, dimension, CMVN."""
    final = out_dir.absolute()
    num_frames = {u: n for r in results for u, n in r.num_frames.items()}
    transforms = {s: t for r in results for s, t in r.transforms.items()}
    speaker_lines = {s: line for r in results for s, line in r.speaker_lines.items()}
    write_transforms(tmp, transforms)
    repoint_scp(tmp / "trans.scp", final / "trans.ark")
    write_table(tmp / "utt2num_frames", {u: str(n) for u, n in num_frames.items()})
    (tmp / "feat_dim").write_text(f"{feature_dim(fcfg)}\n")
    stats = merge_stats(r.stats for r in results)
    cmvn.write_stats(stats, tmp, cmvn_unit)
    if stats:
        repoint_scp(tmp / "cmvn.scp", final / "cmvn.ark")
    # speaker, frames, adapted|identity, log-likelihood per frame before/after, and the same
    # plus log|det A| (the objective fMLLR maximises) before/after
    write_table(tmp / "fmllr_speakers", speaker_lines)
    if (base_dir / "fbank.conf").is_file():
        shutil.copyfile(base_dir / "fbank.conf", tmp / "fbank.conf")
    skipped = {**(read_table(base_dir / "skipped") if (base_dir / "skipped").is_file() else {}),
               **{u: reason for r in results for u, reason in r.skipped.items()}}
    if skipped:
        write_table(tmp / "skipped", skipped)
    (tmp / CHECKSUM_FILE).write_text(expected)
    adapted = sum(1 for line in speaker_lines.values() if " adapted " in line)
    log.info("%s: %d of %d speakers adapted (the others had fewer than %g frames: identity)",
             out_dir.name, adapted, len(speaker_lines), fcfg.fmllr.min_count)
    return SetSummary(out_dir.name, len(num_frames), sum(num_frames.values()), 0.0, 0.0, len(skipped))
