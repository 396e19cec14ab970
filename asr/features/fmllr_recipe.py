"""The fMLLR feature recipes (features.kind = fmllr | fmllr_fbank | fmllr_ivector_fbank).

Per frame the features are
  fmllr         W_s [P splice(CMN_s(x_t)); 1]                       (features.fmllr.dim)
  fmllr_fbank   [ fMLLR as above | x_t | delta x_t | delta^2 x_t ]  (dim + D * (1 + delta_order))
  fmllr_ivector_fbank   [ fMLLR | i-vector | x_t | delta x_t | delta^2 x_t ]  (+ features.ivector.dim)
where x_t is the log-mel frame, CMN_s the speaker's mean normalisation, P the LDA+MLLT matrix
and W_s the speaker's fMLLR transform. The sets store [fMLLR | (i-vector) | x_t] and name the
log-mel columns in `delta_columns`: the reader appends their deltas (asr.features.featureset),
then normalises the whole vector with the CMVN statistics stored beside it per `features.cmvn`.
Those statistics are of the vector with its deltas; the i-vector's columns hold the statistics
of an identity normalisation (mean 0, variance 1), so the i-vector is used as it is.

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

import numpy as np
import torch

from asr.data.datadir import read_data_dir, read_table, spk2utt, write_table
from asr.features import cmvn
from asr.features.extract import (SetSummary, _add_stats, _log_summary, join_parts, merge_stats, non_finite_problem,
                                  repoint_scp, run_parts)
from asr.features.fbank import FbankOptions
from asr.features.featureset import FeatureLayout, FeatureWriter, LoadDeltas
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
SET_OUTPUTS = ("feats.ark", "feats.scp", "utt2num_frames", "feat_dim", "cmvn_type", "trans.scp", CHECKSUM_FILE)
STORED_LAYOUT = "deltas appended on reading"  # sets that stored their deltas are made again
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
    root = Path(fcfg.feats_dir) / fcfg.name
    sets = (cfg.data.train_set, cfg.data.dev_set, cfg.data.eval_set)
    base = make_base_sets(cfg, root)
    if fcfg.split.index >= 0:
        return base  # one cluster share of the log-mel: the model and adaptation run after the merge
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
    data = read_data_dir(data_dir, tables=())
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
    cmvn: str
    fmllr: FmllrOptions
    device: str
    layout: FeatureLayout  # what the set stores and the reader appends
    ivector_columns: tuple[int, int] = (0, 0)  # fmllr_ivector_fbank: [first, last) of the i-vector
    ivector_dir: str = ""  # fmllr_ivector_fbank: the set's i-vectors (asr.features.ivector_recipe)
    compress: bool = False

    @classmethod
    def from_config(cls, fcfg: Any, ivector_dir: Path | None = None) -> "AdaptOptions":
        first = fmllr_dim(fcfg)
        ivector = fcfg.ivector.dim if fcfg.kind == "fmllr_ivector_fbank" else 0
        logmel = FbankOptions.from_config(fcfg).dim
        deltas = None
        if fcfg.kind in WITH_LOGMEL and fcfg.delta_order > 0:
            deltas = LoadDeltas(fcfg.delta_order, fcfg.delta_window, first + ivector, first + ivector + logmel)
        return cls(fcfg.kind, fcfg.cmvn, FmllrOptions.from_config(fcfg.fmllr), fcfg.device,
                   FeatureLayout(feature_dim(fcfg), deltas), (first, first + ivector),
                   str(ivector_dir) if ivector_dir is not None else "", fcfg.compress)


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
                        fcfg.cmvn, plain(fcfg.fmllr), ivectors, STORED_LAYOUT, fcfg.compress)
    if not fcfg.force and complete(out_dir, SET_OUTPUTS, expected):
        log.info("%s: complete already (%s), skipping; features.force=true recomputes it", out_dir.name, out_dir)
        return SetSummary(out_dir.name, 0, 0, 0.0, 0.0, 0, skipped=True)
    started = time.perf_counter()
    utt2spk = read_data_dir(data_dir, tables=()).utt2spk
    num_frames = {u: int(n) for u, n in read_table(base_dir / "utt2num_frames").items()}
    speakers = spk2utt({u: s for u, s in utt2spk.items() if u in num_frames})
    if not speakers:
        raise InputError(f"{base_dir}: no features to adapt; check the filterbank stage's log")
    parts = split_speakers(speakers, num_frames, fcfg.jobs)
    log.info("%s: fMLLR for %d speakers in %d part(s) into %s", out_dir.name, len(speakers), len(parts), out_dir)
    options = AdaptOptions.from_config(fcfg, ivector_dir)
    with atomic_dir(out_dir) as tmp:
        tasks = [AdaptTask(i, part, str(model_dir), str(base_dir), str(tmp), {u: s for s, us in part.items() for u in us}, options)
                 for i, part in enumerate(parts)]
        results = run_parts(tasks, desc=out_dir.name, total=len(speakers), work=adapt_part, unit="spk")
        join_parts(tmp, out_dir, len(parts))
        summary = _finish_set(results, tmp, out_dir, base_dir, fcfg, options, expected)
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
    with FeatureWriter(out / f"feats.{task.index}.ark", out / f"feats.{task.index}.scp", opts.compress) as writer:
        for speaker, utts in task.speakers.items():
            for utt, feats in adapt_speaker(model, frames, speaker, utts, opts, result, ivectors):
                problem = non_finite_problem(feats)
                if problem:
                    result.skipped[utt] = problem
                    continue
                stored = writer(utt, feats)
                result.num_frames[utt] = feats.shape[0]
                if opts.cmvn != "none":  # statistics of what the reader normalises: deltas included
                    _add_stats(result.stats, cmvn.compute_stats(opts.cmvn, {utt: opts.layout.expand(stored)}, task.utt2spk))
            on_speaker_done()
    return result


def adapt_speaker(model: FmllrModel, frames: SpeakerFrames, speaker: str, utts: list[str], opts: AdaptOptions,
                  result: AdaptResult, ivectors: IvectorReader | None = None) -> list[tuple[str, np.ndarray]]:
    """(utt, stored features) for one speaker; its transform and diagnostics go to `result`."""
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
        parts = [adapted]
        if ivectors is not None:
            parts.append(ivectors(utt, adapted.shape[0]).astype(np.float32))
        if opts.kind in WITH_LOGMEL:
            parts.append(r.astype(np.float32))
        out.append((utt, np.concatenate(parts, axis=1)))
    return out


def with_identity_columns(stats: dict[str, np.ndarray], columns: tuple[int, int]) -> dict[str, np.ndarray]:
    """CMVN statistics whose `columns` normalise as the identity (sum 0, sum of squares = count:
    mean 0, variance 1), so Kaldi's apply-cmvn leaves those dimensions as they are."""
    first, last = columns
    for value in stats.values():
        value[0, first:last] = 0.0
        value[1, first:last] = value[0, -1]
    return stats


def _finish_set(results: list[AdaptResult], tmp: Path, out_dir: Path, base_dir: Path, fcfg: Any, options: AdaptOptions,
                expected: str) -> SetSummary:
    """Everything beside the joined features: transforms, frame counts, dimension, CMVN."""
    final = out_dir.absolute()
    num_frames = {u: n for r in results for u, n in r.num_frames.items()}
    transforms = {s: t for r in results for s, t in r.transforms.items()}
    speaker_lines = {s: line for r in results for s, line in r.speaker_lines.items()}
    write_transforms(tmp, transforms)
    repoint_scp(tmp / "trans.scp", final / "trans.ark")
    write_table(tmp / "utt2num_frames", {u: str(n) for u, n in num_frames.items()})
    (tmp / "feat_dim").write_text(f"{options.layout.feat_dim}\n")
    if options.layout.deltas:
        options.layout.deltas.write(tmp)
    (tmp / "compress").write_text(f"{str(options.compress).lower()}\n")
    stats = with_identity_columns(merge_stats(r.stats for r in results), options.ivector_columns)
    cmvn.write_stats(stats, tmp, options.cmvn)
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
