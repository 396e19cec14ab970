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

With `features.fmllr.system=DIR` (a SAT GMM-HMM system of asr.gmm, e.g. exp/tri4) the fMLLR
columns are that system's speaker-adapted features instead, `DIR/fmllr_feats/<set>/` as
`python -m asr.gmm.fmllr_feats` writes them (its LDA+MLLT matrix, each speaker's transform from
its training, dev alignment or two-pass decoding), pasted frame by frame with the i-vectors and
log-mel as Kaldi's paste-feats does (the same frames, or an error naming both). No UBM is trained.

Layout under <feats_dir>/<name>/:
  fbank/<set>/   the log-mel filterbank (asr.features.logmel.extract), with per-speaker CMVN stats
  gmm/           the adaptation model trained on the training set (asr.features.fmllr.model;
                 not with fmllr.system)
  extractor/, ivector/<set>/   (fmllr_ivector_fbank) the i-vector extractor and each set's
                 i-vectors (asr.features.ivector.recipe)
  <set>/         feats.{ark,scp}, utt2num_frames, feat_dim, cmvn.{ark,scp}, cmvn_type,
                 trans.{ark,scp} (per-speaker fMLLR transforms, Kaldi matrices d x (d+1)),
                 fmllr_speakers (per speaker: frames, adapted|identity, log-likelihood per
                 frame before/after, and with log|det A| added before/after; with fmllr.system:
                 frames and `system`), features.record.json
Each directory is built under a temporary name and renamed when complete; a re-run skips
the parts whose inputs and options did not change. The speakers of a set are split over
`features.jobs` worker processes (one torch thread each).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import kaldiio
import numpy as np
import torch

from asr.features import cmvn
from asr.features.pool import run_parts, single_thread
from asr.features.summary import SetSummary, log_summary
from asr.features.logmel.options import FbankOptions
from asr.features.featureset import FeatureLayout, FeatureWriter, LoadDeltas, non_finite_problem
from asr.features.fmllr.system import FMLLR_FEATS_STAGE, system_set_dir
from asr.features.fmllr.transform import FmllrResult, transform_frames
from asr.features.fmllr.model import (
    FmllrModel,
    FmllrOptions,
    SpeakerFrames,
    read_logmel,
    speaker_cmvn,
    train_fmllr_model,
    write_report,
)
from asr.features.ivector.recipe import IvectorReader, ivector_sets, make_base_sets
from asr.features.parts import in_key_order, join_parts, merge_part_tables, merge_skipped, repoint_scp
from asr.features.provenance import made_with, plain, seal, source_files, why_incomplete
from asr.features.subset import balance_speakers, speaker_frames, streamed_subset
from asr.kaldi import commands
from asr.kaldi.matrix import read_transform_ark
from asr.kaldi.table import Lookup, c_sort_key, sorted_table
from asr.utils.atomic import atomic_dir
from asr.utils.errors import InputError
from asr.utils.record import record_path

log = logging.getLogger("asr.features")

KINDS = ("fmllr", "fmllr_fbank", "fmllr_ivector_fbank")
WITH_LOGMEL = ("fmllr_fbank", "fmllr_ivector_fbank")
STORED_LAYOUT = "deltas appended on reading"  # sets that stored their deltas are made again
PART_TABLES = ("utt2num_frames", "fmllr_speakers", "skipped")  # written by each part, merged in key order


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
    if (
        not fcfg.fmllr.system
        and fcfg.fmllr.lda
        and fcfg.fmllr.dim > FbankOptions.from_config(fcfg).dim * (fcfg.fmllr.splice_left + 1 + fcfg.fmllr.splice_right)
    ):
        raise InputError(f"features.fmllr.dim={fcfg.fmllr.dim} exceeds the spliced log-mel dimension")
    root = Path(fcfg.feats_dir) / fcfg.name
    sets = (cfg.data.train_set, cfg.data.dev_set, cfg.data.eval_set)
    base = make_base_sets(cfg, root)
    if fcfg.split.index >= 0:
        return base  # one cluster share of the log-mel: the model and adaptation run after the merge
    if not fcfg.fmllr.system:
        train_set = cfg.data.train_set
        ensure_model(root / "gmm", root / "fbank" / train_set, Path(cfg.data.data_dir) / train_set, fcfg)
    ivectors = (
        ivector_sets(cfg, root, root / "ivector", write_feats=False) if fcfg.kind == "fmllr_ivector_fbank" else {}
    )
    return [
        adapt_set(
            system_set_dir(fcfg.fmllr.system, s) if fcfg.fmllr.system else root / "gmm",
            root / "fbank" / s,
            Path(cfg.data.data_dir) / s,
            root / s,
            fcfg,
            ivectors[s][0] if s in ivectors else None,
        )
        for s in sets
    ]


# ------------------------------------------------------------------------ model


def ensure_model(model_dir: Path, base_dir: Path, data_dir: Path, fcfg: Any) -> None:
    """Train the adaptation model unless its stage record says it is made from the same
    options and log-mel set."""
    options, inputs = fmllr_options(fcfg), source_files(base_dir)
    reason = why_incomplete(model_dir, options, inputs, fcfg.force)
    if reason is None:
        log.info("fMLLR model: complete already (%s)", model_dir)
        return
    log.info("fMLLR model: training on %s into %s (%s)", base_dir, model_dir, reason)
    started = time.perf_counter()
    subset = streamed_subset(
        utt2spk_of(data_dir), base_dir / "utt2num_frames", fcfg.fmllr.max_train_frames, fcfg.fmllr.min_count
    )
    frames = SpeakerFrames(base_dir, subset.speaker_of, fcfg.fmllr.base_norm_vars)
    model, report = train_fmllr_model(frames, subset, fcfg.fmllr, fcfg.device, fcfg.jobs)
    report["seconds"] = round(time.perf_counter() - started, 1)
    with atomic_dir(model_dir) as tmp:
        model.save(tmp)
        write_report(tmp / "report.json", report)
        seal(tmp, options, inputs)
    log.info(
        "fMLLR model: %d Gaussians of dim %d trained in %.1f s", model.gmm.num_components, model.dim, report["seconds"]
    )


def utt2spk_of(data_dir: Path) -> Path:
    if not (data_dir / "utt2spk").is_file():
        raise InputError(f"{data_dir / 'utt2spk'}: missing; run the prepare stage (python -m asr.data.prepare)")
    return data_dir / "utt2spk"


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
    ivector_dir: str = ""  # fmllr_ivector_fbank: the set's i-vectors (asr.features.ivector.recipe)
    compress: bool = False
    from_system: bool = False  # the fMLLR columns are a GMM system's adapted features (fmllr.system)

    @classmethod
    def from_config(cls, fcfg: Any, ivector_dir: Path | None = None) -> "AdaptOptions":
        first = fmllr_dim(fcfg)
        ivector = fcfg.ivector.dim if fcfg.kind == "fmllr_ivector_fbank" else 0
        logmel = FbankOptions.from_config(fcfg).dim
        deltas = None
        if fcfg.kind in WITH_LOGMEL and fcfg.delta_order > 0:
            deltas = LoadDeltas(fcfg.delta_order, fcfg.delta_window, first + ivector, first + ivector + logmel)
        return cls(
            fcfg.kind,
            fcfg.cmvn,
            FmllrOptions.from_config(fcfg.fmllr),
            fcfg.device,
            FeatureLayout(feature_dim(fcfg), deltas),
            (first, first + ivector),
            str(ivector_dir) if ivector_dir is not None else "",
            fcfg.compress,
            bool(fcfg.fmllr.system),
        )


@dataclass
class AdaptTask:
    index: int
    speakers: list[str]  # this part's speakers
    model_dir: str  # the UBM adaptation model, or with fmllr.system the system's adapted set
    base_dir: str  # the set's log-mel features
    utt2spk: str  # the set's data dir utt2spk
    out_dir: str  # the set's temporary directory; the part writes its <file>.<index> there
    options: AdaptOptions


@dataclass
class AdaptResult:
    """What a part sends back: counts, and the CMVN statistics of its output per speaker (or
    global; per-utterance statistics go to its cmvn.<index>.ark)."""

    utterances: int = 0
    frames: int = 0
    adapted_speakers: int = 0
    stats: dict[str, np.ndarray] = field(default_factory=dict)


def set_options(fcfg: Any) -> dict:
    """What changes an adapted set besides its inputs (the model, the log-mel set, the i-vectors)."""
    names = ("kind", "delta_order", "delta_window", "cmvn", "compress")
    return {**{k: getattr(fcfg, k) for k in names}, "fmllr": fmllr_options(fcfg), "layout": STORED_LAYOUT}


def fmllr_options(fcfg: Any) -> dict:
    """What of features.fmllr changes a model or set: the GMM system it reads, or else the UBM front
    end's options (with no `system` key, as records written before it existed say)."""
    options = plain(fcfg.fmllr)
    system = options.pop("system", "")
    return {"system": system, "dim": options["dim"]} if system else options


def adapt_set(
    model_dir: Path,
    base_dir: Path,
    data_dir: Path,
    out_dir: Path,
    fcfg: Any,
    ivector_dir: Path | None = None,
) -> SetSummary:
    """Per-speaker fMLLR of one set and the recipe's per-frame composition (with the i-vectors
    in `ivector_dir` for fmllr_ivector_fbank), the speakers split over `features.jobs` worker
    processes. Every process reads the set's tables in step, so none holds a line per utterance.
    With fmllr.system, `model_dir` is the system's adapted set (system_set_dir)."""
    if fcfg.kind == "fmllr_ivector_fbank" and ivector_dir is None:
        raise ValueError("fmllr_ivector_fbank needs the set's i-vector directory")
    if fcfg.fmllr.system:
        fmllr_source = [SystemFeatures.check(model_dir, fcfg.fmllr.dim)]
    else:
        fmllr_source = made_with(model_dir)
    made_from = (
        set_options(fcfg),
        fmllr_source + made_with(ivector_dir) + source_files(base_dir),
    )
    if why_incomplete(out_dir, *made_from, fcfg.force) is None:
        log.info("%s: complete already (%s), skipping; features.force=true recomputes it", out_dir.name, out_dir)
        return SetSummary(out_dir.name, 0, 0, 0.0, 0.0, 0, skipped=True)
    started = time.perf_counter()
    frames = speaker_frames(utt2spk_of(data_dir), base_dir / "utt2num_frames")
    if not frames:
        raise InputError(f"{base_dir}: no features to adapt; check the filterbank stage's log")
    parts = balance_speakers(frames, fcfg.jobs)
    log.info("%s: fMLLR for %d speakers in %d part(s) into %s", out_dir.name, len(frames), len(parts), out_dir)
    options = AdaptOptions.from_config(fcfg, ivector_dir)
    with atomic_dir(out_dir) as tmp:
        tasks = [
            AdaptTask(
                i,
                sorted(part, key=c_sort_key),
                str(model_dir),
                str(base_dir),
                str(data_dir / "utt2spk"),
                str(tmp),
                options,
            )
            for i, part in enumerate(parts)
        ]
        results = run_parts(tasks, desc=out_dir.name, total=len(frames), work=adapt_part, unit="spk")
        summary = _finish_set(results, tmp, out_dir, base_dir, fcfg, options, made_from, len(frames))
    summary.wall_seconds = time.perf_counter() - started
    summary.seconds = summary.frames * fcfg.frame_shift_ms / 1000.0  # one frame per shift
    log_summary(summary)
    return summary


def adapt_part(task: AdaptTask, on_speaker_done) -> AdaptResult:
    """One part's speakers: transforms and composed features into its part files."""
    with single_thread():
        return _adapt_part(task, on_speaker_done)


def _adapt_part(task: AdaptTask, on_speaker_done) -> AdaptResult:
    opts = task.options
    base = Path(task.base_dir)
    commands.check_table(base / "feats.scp", commands.scp_command)
    adapt = SystemFeatures(Path(task.model_dir)) if opts.from_system else UbmAdaptation(task.model_dir, base, opts)
    ivectors = IvectorReader(opts.ivector_dir) if opts.ivector_dir else None
    with PartOutputs(Path(task.out_dir), task.index, opts) as out:
        for speaker, entries in part_utterances(task):
            utts = [utt for utt, _ in entries]
            raw = [read_logmel(base, utt, entry) for utt, entry in entries]
            transform, fmllr = adapt(speaker, utts, raw)
            out.speaker(speaker, transform)
            for utt, feats in compose(utts, fmllr, raw, opts, ivectors):
                out.utterance(utt, speaker, feats)
            on_speaker_done()
    return out.result


def part_utterances(task: AdaptTask) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """(speaker, [(utt, feats.scp entry)]) of the part's speakers, in key order: the set's
    feats.scp and utt2spk read in step (a speaker's utterances are together in sorted order,
    speaker ids being prefixes of utterance ids)."""
    wanted, done = set(task.speakers), set()
    speakers = Lookup(task.utt2spk)
    current, entries = None, []
    for _, utt, entry in sorted_table(Path(task.base_dir) / "feats.scp"):
        speaker = speakers.get(utt)
        if speaker not in wanted:
            continue
        if speaker != current:
            if current is not None:
                yield current, entries
                done.add(current)
            if speaker in done:
                raise InputError(
                    f"{task.utt2spk}: the utterances of speaker {speaker!r} are not together in sorted order; "
                    "speaker ids must be prefixes of utterance ids (python -m asr.data.validate)"
                )
            current, entries = speaker, []
        entries.append((utt, entry))
    if current is not None:
        yield current, entries


class UbmAdaptation:
    """A speaker's transform under the recipe's own model (LDA+MLLT, SAT-trained UBM), estimated
    from the speaker's own frames, and the adapted frames of its utterances."""

    def __init__(self, model_dir: str, base: Path, opts: AdaptOptions):
        self.model = FmllrModel.load(model_dir, opts.device)
        self.normalise = speaker_cmvn(base, {}, self.model.norm_vars)
        self.opts = opts.fmllr

    def __call__(self, speaker: str, utts: list[str], raw: list[np.ndarray]):
        projected = [self.model.project(self.normalise(utt, r, speaker)) for utt, r in zip(utts, raw)]
        device = self.model.gmm.means.device
        fmllr = self.opts.estimate(self.model.gmm, torch.from_numpy(np.concatenate(projected)).to(device))
        return fmllr, [transform_frames(torch.from_numpy(z), fmllr.transform).numpy() for z in projected]


class SystemFeatures:
    """A GMM system's speaker-adapted features of one set (asr.gmm.adapted_features): per speaker
    its transform and its utterances' frames, which must be as many as the log-mel's."""

    def __init__(self, set_dir: Path):
        self.set_dir = set_dir
        self.feats = commands.load_scp(set_dir / "feats.scp")
        self.transforms = read_transform_ark(set_dir / "trans.ark")

    @staticmethod
    def check(set_dir: Path, dim: int) -> Path:
        """The set's record (what names it among the adapted set's inputs), after checking that
        the set is there with `dim` columns."""
        scp, record = set_dir / "feats.scp", record_path(set_dir, FMLLR_FEATS_STAGE)
        if not scp.is_file() or not (set_dir / "trans.ark").is_file():
            raise InputError(
                f"{set_dir}: no speaker-adapted features (feats.scp, trans.ark) of features.fmllr.system; "
                f"run python -m asr.gmm.fmllr_feats gmm=sat gmm.dir={set_dir.parent.parent} first"
            )
        first = next(iter(commands.load_scp(scp).values()), None)
        if first is not None and first.shape[1] != dim:
            found = first.shape[1]
            raise InputError(f"{scp}: {found}-dim features, features.fmllr.dim={dim}; set features.fmllr.dim={found}")
        return record if record.is_file() else scp

    def __call__(self, speaker: str, utts: list[str], raw: list[np.ndarray]):
        frames = []
        for utt, r in zip(utts, raw):
            if utt not in self.feats:
                raise InputError(
                    f"{self.set_dir / 'feats.scp'}: no {utt}; make the system's features of every utterance"
                )
            feats = self.feats[utt]
            if feats.shape[0] != r.shape[0]:
                raise InputError(
                    f"{self.set_dir / 'feats.scp'}: {utt} has {feats.shape[0]} frames, its log-mel {r.shape[0]}; "
                    "the system's features must come from the same framing (features.frame_*, snip_edges)"
                )
            frames.append(feats)
        transform = self.transforms.get(speaker)
        if transform is None:
            raise InputError(f"{self.set_dir / 'trans.ark'}: no transform of speaker {speaker}")
        return SystemTransform(transform, sum(len(f) for f in frames)), frames


@dataclass
class SystemTransform:
    """A speaker's transform as a GMM system estimated it (PartOutputs writes it as is)."""

    transform: np.ndarray
    count: int


def compose(
    utts: list[str],
    fmllr: list[np.ndarray],
    raw: list[np.ndarray],
    opts: AdaptOptions,
    ivectors: IvectorReader | None = None,
) -> Iterator[tuple[str, np.ndarray]]:
    """(utt, stored features) of a speaker's utterances: [fMLLR | (i-vector) | (log-mel)]."""
    for utt, adapted, r in zip(utts, fmllr, raw):
        parts = [adapted.astype(np.float32)]
        if ivectors is not None:
            parts.append(ivectors(utt, adapted.shape[0]).astype(np.float32))
        if opts.kind in WITH_LOGMEL:
            parts.append(r.astype(np.float32))
        yield utt, np.concatenate(parts, axis=1)


class PartOutputs:
    """One part's files in the set's temporary directory, written speaker by speaker (so in key
    order, for a streaming merge): feats and trans .<index>.{ark,scp}; utt2num_frames,
    fmllr_speakers and skipped .<index>; per-utterance CMVN statistics in cmvn.<index>.{ark,scp}."""

    def __init__(self, out: Path, index: int, opts: AdaptOptions):
        self.opts, self.result = opts, AdaptResult()
        self.files = contextlib.ExitStack()
        self.feats = self.files.enter_context(
            FeatureWriter(out / f"feats.{index}.ark", out / f"feats.{index}.scp", opts.compress)
        )
        self.transforms = self.files.enter_context(
            kaldiio.WriteHelper(f"ark,scp:{out / f'trans.{index}.ark'},{out / f'trans.{index}.scp'}")
        )
        self.tables = {
            name: self.files.enter_context(open(out / f"{name}.{index}", "w", encoding="utf-8")) for name in PART_TABLES
        }
        self.utterance_stats = None
        if opts.cmvn == "utterance":
            spec = f"ark,scp:{out / f'cmvn.{index}.ark'},{out / f'cmvn.{index}.scp'}"
            self.utterance_stats = self.files.enter_context(kaldiio.WriteHelper(spec))

    def speaker(self, speaker: str, fmllr: FmllrResult | SystemTransform) -> None:
        self.transforms(speaker, np.ascontiguousarray(fmllr.transform, dtype=np.float32))
        if isinstance(fmllr, SystemTransform):
            self.tables["fmllr_speakers"].write(f"{speaker} {fmllr.count} system\n")
            self.result.adapted_speakers += 1
            return
        # frames, adapted|identity, log-likelihood per frame before/after, and the same plus
        # log|det A| (the objective fMLLR maximises) before/after
        self.tables["fmllr_speakers"].write(
            f"{speaker} {fmllr.count:.0f} {'adapted' if fmllr.updated else 'identity'} "
            f"{fmllr.loglike_before:.4f} {fmllr.loglike_after:.4f} "
            f"{fmllr.objective[0]:.4f} {fmllr.objective[-1]:.4f}\n"
        )
        self.result.adapted_speakers += bool(fmllr.updated)

    def utterance(self, utt: str, speaker: str, feats: np.ndarray) -> None:
        problem = non_finite_problem(feats)
        if problem:
            self.tables["skipped"].write(f"{utt} {problem}\n")
            return
        stored = self.feats(utt, feats)
        self.tables["utt2num_frames"].write(f"{utt} {feats.shape[0]}\n")
        self.result.utterances += 1
        self.result.frames += feats.shape[0]
        if self.opts.cmvn == "none":
            return
        # statistics of what the reader normalises: deltas included
        stats = with_identity_columns(
            cmvn.compute_stats(self.opts.cmvn, {utt: self.opts.layout.expand(stored)}, {utt: speaker}),
            self.opts.ivector_columns,
        )
        if self.utterance_stats is not None:
            self.utterance_stats(utt, stats[utt])
        else:
            cmvn.add_stats(self.result.stats, stats)

    def __enter__(self) -> "PartOutputs":
        return self

    def __exit__(self, *exc) -> None:
        self.files.close()


def with_identity_columns(stats: dict[str, np.ndarray], columns: tuple[int, int]) -> dict[str, np.ndarray]:
    """CMVN statistics whose `columns` normalise as the identity (sum 0, sum of squares = count:
    mean 0, variance 1), so Kaldi's apply-cmvn leaves those dimensions as they are."""
    first, last = columns
    for value in stats.values():
        value[0, first:last] = 0.0
        value[1, first:last] = value[0, -1]
    return stats


def _finish_set(
    results: list[AdaptResult],
    tmp: Path,
    out_dir: Path,
    base_dir: Path,
    fcfg: Any,
    options: AdaptOptions,
    made_from: tuple[dict, list[Path]],
    speakers: int,
) -> SetSummary:
    """The parts joined, and everything beside them: dimension, layout, CMVN, skipped utterances."""
    parts = len(results)
    join_parts(tmp, out_dir, parts)
    join_parts(tmp, out_dir, parts, "trans")
    merge_part_tables(tmp, "utt2num_frames", parts)
    merge_part_tables(tmp, "fmllr_speakers", parts)
    skipped_before = in_key_order(base_dir / "skipped") if (base_dir / "skipped").is_file() else iter(())
    skipped = merge_skipped(tmp, parts, skipped_before)
    (tmp / "feat_dim").write_text(f"{options.layout.feat_dim}\n")
    if options.layout.deltas:
        options.layout.deltas.write(tmp)
    (tmp / "compress").write_text(f"{str(options.compress).lower()}\n")
    if options.cmvn == "utterance":
        join_parts(tmp, out_dir, parts, "cmvn")
        (tmp / "cmvn_type").write_text("utterance\n")
    else:
        stats = cmvn.merge_stats(r.stats for r in results)
        cmvn.write_stats(stats, tmp, options.cmvn)
        if stats:
            repoint_scp(tmp / "cmvn.scp", out_dir.absolute() / "cmvn.ark")
    if (base_dir / "fbank.conf").is_file():
        shutil.copyfile(base_dir / "fbank.conf", tmp / "fbank.conf")
    seal(tmp, *made_from)
    log.info(
        "%s: %d of %d speakers adapted (the others had fewer than %g frames: identity)",
        out_dir.name,
        sum(r.adapted_speakers for r in results),
        speakers,
        fcfg.fmllr.min_count,
    )
    return SetSummary(
        out_dir.name, sum(r.utterances for r in results), sum(r.frames for r in results), 0.0, 0.0, skipped
    )
