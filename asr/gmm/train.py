"""GMM-HMM training as Kaldi's steps/train_mono.sh and align_si.sh, in jobs over shares.

Monophones (`train_mono`): the flat start gives every pdf one Gaussian with the global mean
and variance of the first `init_utts` utterances (gmm-init-mono), the training graphs are
aligned evenly and one EM update follows (gmm-est --min-gaussian-occupancy=3); then passes
1 .. num_iters-1 each realign when listed in `realign_iters` (the first with `initial_beam`),
accumulate and update, and mix up by (total_gauss - initial) / max_iter_inc Gaussians a pass
until `max_iter_inc`. The final model aligns `align_set` (align_si.sh) into ali.N.gz.

The output directory is built under a temporary name and swapped in when complete:
final.mdl, tree, ali.N.gz, num_jobs, log/train.log (a line per pass) and summary.json
(the passes, timings and, with gmm.phone_timings, the boundary accuracy).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import kaldi_hmm_gmm as khg
import numpy as np

from asr.data.datadir import read_data_dir
from asr.features.featureset import read_num_frames
from asr.gmm.adaptation import estimate_transforms
from asr.gmm.frontend import Projection
from asr.gmm.graphs import AlignOptions
from asr.gmm.jobs import Jobs, make_jobs
from asr.gmm.shares import (
    PassResult,
    PassSpec,
    ShareFeatures,
    ShareSpec,
    TreeStatsSpec,
    prepare_share,
    run_share,
    share_tree_stats,
    share_utterances,
    split_shares,
)
from asr.gmm.stats import ModelArrays, update
from asr.kaldi.model import read_model, write_model
from asr.kaldi.tree import load_context_dependency
from asr.kaldi.table import c_sort_key
from asr.kaldi.alignments import natural_key, parse_int_vector_archive, read_archive_bytes
from asr.utils.atomic import atomic_dir, write_text
from asr.utils.errors import InputError
from asr.utils.record import outputs_of, write_record

log = logging.getLogger("asr.gmm")
STAGE, RERUN = "gmm", "python -m asr.gmm"
MadeFrom = tuple[dict, list[Path]]  # a system's options and inputs, for its stage record (asr/gmm/stage.py)


@dataclass
class TrainingData:
    """A set's utterances (sorted), their word ids and frames, and where their features are."""

    utts: list[str]
    texts: dict[str, list[int]]
    frames: dict[str, int]
    utt2spk: dict[str, str]
    feats_dir: Path


@dataclass
class System:
    """A trained GMM-HMM system: tree, transition model, GMMs, the passes that made it and its
    features' Projection; a SAT system also has its speaker-independent alignment model."""

    tree: Any
    tm: Any
    am: Any
    history: list
    projection: Projection
    align_am: Any = None  # final.alimdl's GMMs (SAT)
    summary: dict = field(default_factory=dict)  # what the kind adds to summary.json


def training_data(data_dir: Path, feats_dir: Path, lang, shortest: int = 0, first: int = 0) -> TrainingData:
    """The utterances with a transcript and features; the `first` N of them in key order (Kaldi's
    subset_data_dir.sh N), then of those the `shortest` N (subset_data_dir.sh --shortest), each when N > 0."""
    data = read_data_dir(data_dir, tables=("utt2spk", "text"))
    if not data.text:
        raise InputError(f"{data_dir / 'text'}: missing or empty; GMM training needs transcripts")
    if not (feats_dir / "feats.scp").is_file():
        raise InputError(f"{feats_dir / 'feats.scp'}: missing; run the features stage for this set")
    frames = read_num_frames(feats_dir, {})
    utts = sorted((u for u in data.text if u in frames and frames[u] > 0), key=c_sort_key)
    if not utts:
        raise InputError(f"{data_dir}: no utterance has both a transcript and features in {feats_dir}")
    if first > 0:
        utts = utts[:first]
    if 0 < shortest < len(utts):
        keep = set(sorted(utts, key=lambda u: (frames[u], c_sort_key(u)))[:shortest])
        utts = [u for u in utts if u in keep]
    texts = {u: lang.word_ids(data.text[u].split()) for u in utts}
    return TrainingData(utts, texts, {u: frames[u] for u in utts}, dict(data.utt2spk), feats_dir)


# --- the model -----------------------------------------------------------------------------------


def global_mean_var(work_dir: Path, projection: Projection, max_utts: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of the first `max_utts` utterances of share 1 (gmm-init-mono's
    --train-feats=... subset-feats --n=10)."""
    frames = []
    for n, (_, feats) in enumerate(ShareFeatures(work_dir, 1, projection)):
        if n >= max_utts:
            break
        frames.append(feats.astype(np.float64))
    stacked = np.concatenate(frames)
    return stacked.mean(axis=0), np.maximum(stacked.var(axis=0), 1e-4)


def flat_start(topo: khg.HmmTopology, mean: np.ndarray, var: np.ndarray):
    """gmm-init-mono: a monophone tree, its transition model, one global Gaussian per pdf."""
    tree = khg.monophone_context_dependency(
        phones=topo.phones, phone2num_pdf_classes=topo.get_phone_to_num_pdf_classes()
    )
    tm = khg.TransitionModel(ctx_dep=tree, hmm_topo=topo)
    gmm = khg.DiagGmm(nmix=1, dim=len(mean))
    gmm.set_weights(np.ones(1, np.float32))
    gmm.set_invvars_and_means((1.0 / var)[None].astype(np.float32), mean[None].astype(np.float32))
    gmm.compute_gconsts()
    am = khg.AmDiagGmm()
    for _ in range(tree.num_pdfs):
        am.add_pdf(gmm)
    return tree, tm, am


# --- passes --------------------------------------------------------------------------------------


@dataclass
class PassLog:
    """What one EM pass measured (the log line and the summary's entry)."""

    iteration: int
    aligned: bool
    log_like_per_frame: float
    frames: int
    num_gauss: int
    failed: int
    align_seconds: float = 0.0
    seconds: float = 0.0
    objf_change: float = 0.0


@dataclass
class Trainer:
    """Runs passes of the jobs over the shares in `work_dir`, alignments into `out_dir`, on
    the features of `projection` (each job gets its own utterances' speakers)."""

    jobs: Jobs
    num_shares: int
    work_dir: Path
    out_dir: Path
    projection: Projection
    silence_phones: tuple[int, ...] = ()
    history: list[PassLog] = field(default_factory=list)

    def run_pass(
        self,
        mode: str,
        tm,
        am,
        opts: AlignOptions,
        accumulate: bool = True,
        gather: tuple[str, ...] = (),
        given: dict | None = None,
    ) -> PassResult:
        """One pass of every job; `given`: mode given's alignments (utterance -> transition ids)."""
        specs = []
        for i in range(1, self.num_shares + 1):
            utts = [u for u, _ in share_utterances(self.work_dir, i)]
            alignments = [(u, given[u]) for u in utts if u in given] if given is not None else None
            projection = self.projection.for_utterances(utts)
            specs.append(
                PassSpec(
                    i, self.work_dir, self.out_dir, mode, (tm, am), projection, opts, accumulate, gather,
                    self.silence_phones, alignments,
                )
            )  # fmt: skip
        total = PassResult(None)
        for result in self.jobs.map(run_share, specs):
            total.add(result)
        if mode in ("equal", "align") and total.aligned == 0:
            raise InputError(
                f"{self.out_dir}: no utterance aligned (all {len(total.failed)} failed); wrong lang or features?"
            )
        return total


def em_pass(trainer: Trainer, iteration: int, mode: str, tm, am, opts: AlignOptions, **update_opts) -> PassLog:
    started = time.perf_counter()
    model = ModelArrays.of(am)
    result = trainer.run_pass(mode, tm, am, opts)
    stats = result.stats
    like = stats.log_like / max(stats.frames, 1)
    change = update(am, tm, stats, model, **update_opts)
    entry = PassLog(
        iteration,
        mode != "read",
        like,
        stats.frames,
        change.num_gauss,
        len(result.failed),
        result.align_seconds,
        time.perf_counter() - started,
        change.gmm_objf_change,
    )
    trainer.history.append(entry)
    log.info(
        "pass %d%s: log-likelihood per frame %.4f over %d frames, %d Gaussians after the update (objf +%.4f), "
        "%d failed; %.1f s (alignment %.1f s)",
        iteration,
        {"equal": " (equal alignment)", "align": " (realigned)", "read": ""}[mode],
        like,
        stats.frames,
        change.num_gauss,
        change.gmm_objf_change,
        len(result.failed),
        entry.seconds,
        entry.align_seconds,
    )
    return entry


def align_opts(cfg: Any, beam: float) -> AlignOptions:
    return AlignOptions(beam, cfg.retry_beam, cfg.acoustic_scale, cfg.transition_scale, cfg.self_loop_scale)


def prepare_shares(
    jobs: Jobs, data: TrainingData, work_dir: Path, cfg: Any, lang, tm, tree, feats: bool = True, graphs: bool = True
) -> int:
    shares = split_shares(data.utts, data.frames, cfg.nj)
    specs = [
        ShareSpec(
            i,
            work_dir,
            utts,
            {u: data.texts[u] for u in utts},
            data.feats_dir,
            data.utt2spk,
            cfg.front_end,
            cfg.num_ceps,
            cfg.cepstral_lifter,
            cfg.cmvn,
            feats,
            graphs,
        )
        for i, utts in enumerate(shares, 1)
    ]
    started = time.perf_counter()
    frames = sum(jobs.map(prepare_share, specs, lang, tm, tree))
    log.info(
        "%d utterances (%d frames) in %d shares: features and graphs in %.1f s",
        len(data.utts),
        frames,
        len(specs),
        time.perf_counter() - started,
    )
    return len(specs)


def train_mono(cfg: Any, lang, data: TrainingData, work_dir: Path, out_dir: Path, jobs: Jobs):
    """train_mono.sh on `data`: returns (tree, transition model, acoustic model, pass logs)."""
    topo = lang.topology()
    tree = khg.monophone_context_dependency(
        phones=topo.phones, phone2num_pdf_classes=topo.get_phone_to_num_pdf_classes()
    )
    tm = khg.TransitionModel(ctx_dep=tree, hmm_topo=topo)
    num_shares = prepare_shares(jobs, data, work_dir, cfg, lang, tm, tree)
    projection = Projection(cfg.delta_order)
    tree, tm, am = flat_start(topo, *global_mean_var(work_dir, projection, cfg.init_utts))
    trainer = Trainer(jobs, num_shares, work_dir, out_dir, projection)
    num_gauss = am.num_gauss
    increment = max(0, (cfg.total_gauss - num_gauss) // max(cfg.max_iter_inc, 1))
    mixing = dict(min_gaussian_occupancy=cfg.min_gaussian_occupancy, power=cfg.power)
    em_pass(trainer, 0, "equal", tm, am, align_opts(cfg, cfg.beam), **{**mixing, "min_gaussian_occupancy": 3.0})
    beam = cfg.initial_beam
    for iteration in range(1, cfg.num_iters):
        mode = "align" if iteration in set(cfg.realign_iters) else "read"
        em_pass(trainer, iteration, mode, tm, am, align_opts(cfg, beam), mixup_to=num_gauss, **mixing)
        if mode == "align":
            beam = cfg.beam
        if iteration <= cfg.max_iter_inc:
            num_gauss += increment
    return System(tree, tm, am, trainer.history, projection)


def read_alignments(ali_dir: Path) -> dict[str, np.ndarray]:
    """Every ali.N.gz of an alignment dir: utterance -> transition ids."""
    files = sorted(ali_dir.glob("ali.*.gz"), key=natural_key)
    if not files:
        raise InputError(f"{ali_dir}: no ali.N.gz; run the monophone stage first (gmm.alignments)")
    return {utt: tids for f in files for utt, tids in parse_int_vector_archive(read_archive_bytes(f), str(f))}


def tree_stats(jobs: Jobs, num_shares: int, work_dir: Path, alignments: dict, old_tm, ci_phones, projection):
    """acc-tree-stats over the shares, merged (sum-tree-stats)."""
    specs = []
    for i in range(1, num_shares + 1):
        utts = [u for u, _ in share_utterances(work_dir, i)]
        kept = {u: alignments[u] for u in utts if u in alignments}
        specs.append(TreeStatsSpec(i, work_dir, kept, old_tm, list(ci_phones), projection))
    parts = jobs.map(share_tree_stats, specs)
    stats = parts[0]
    for part in parts[1:]:
        stats = stats.merge(part)
    return stats


def init_from_tree(cfg: Any, lang, stats):
    """build-tree + gmm-init-model: the tree (roots: each phone alone, as the lang's
    `shared split` roots.txt), its transition model, one Gaussian per pdf from the stats."""
    from asr.hmm.tree import build_tree, kaldi_questions, pdf_gaussians

    topo = lang.topology()
    questions = kaldi_questions(stats, topo, lang.silence_phones, lang.nonsilence_phones)
    roots = [[p] for p in [*lang.silence_phones, *lang.nonsilence_phones]]
    built = build_tree(stats, roots, questions, cfg.num_leaves)
    tm = khg.TransitionModel(ctx_dep=built.ctx_dep, hmm_topo=topo)
    _, means, variances = pdf_gaussians(stats, built.tree, built.num_pdfs)
    am = khg.AmDiagGmm()
    for mean, var in zip(means, variances):
        gmm = khg.DiagGmm(nmix=1, dim=len(mean))
        gmm.set_weights(np.ones(1, np.float32))
        gmm.set_invvars_and_means((1.0 / var)[None].astype(np.float32), mean[None].astype(np.float32))
        gmm.compute_gconsts()
        am.add_pdf(gmm)
    log.info(
        "tree: %d pdfs (num_leaves %d), objective %.4g -> %.4g per frame",
        built.num_pdfs,
        cfg.num_leaves,
        built.objf_roots / stats.num_frames,
        built.objf / stats.num_frames,
    )
    return built, tm, am


def train_tri(cfg: Any, lang, data: TrainingData, work_dir: Path, out_dir: Path, jobs: Jobs):
    """train_deltas.sh on `data` from the alignments in cfg.alignments: tree statistics under the
    old model, the tree, a model initialised from its statistics; the old alignments are
    converted to the new tree by aligning with that model (Kaldi's convert-ali keeps the old
    timing instead), then EM as for monophones."""
    old_dir = Path(cfg.alignments)
    from asr.kaldi.model import read_model

    old_tm, _ = read_model(old_dir / "final.mdl")
    alignments = read_alignments(old_dir)
    topo = lang.topology()
    mono_tree = khg.monophone_context_dependency(
        phones=topo.phones, phone2num_pdf_classes=topo.get_phone_to_num_pdf_classes()
    )
    num_shares = prepare_shares(jobs, data, work_dir, cfg, lang, old_tm, mono_tree, graphs=False)
    projection = Projection(cfg.delta_order)
    stats = tree_stats(jobs, num_shares, work_dir, alignments, old_tm, lang.silence_phones, projection)
    built, tm, am = init_from_tree(cfg, lang, stats)
    prepare_shares(jobs, data, work_dir, cfg, lang, tm, built.ctx_dep, feats=False)
    trainer = Trainer(jobs, num_shares, work_dir, out_dir, projection)
    num_gauss = max(am.num_gauss, cfg.num_leaves)
    increment = max(0, (cfg.total_gauss - num_gauss) // max(cfg.max_iter_inc, 1))
    mixing = dict(min_gaussian_occupancy=cfg.min_gaussian_occupancy, power=cfg.power)
    for iteration in range(1, cfg.num_iters):
        mode = "align" if iteration == 1 or iteration in set(cfg.realign_iters) else "read"
        em_pass(trainer, iteration, mode, tm, am, align_opts(cfg, cfg.beam), mixup_to=num_gauss, **mixing)
        if iteration <= cfg.max_iter_inc:
            num_gauss += increment
    return System(built.ctx_dep, tm, am, trainer.history, projection)


def align_set(cfg: Any, lang, data: TrainingData, system: System, work_dir: Path, out_dir: Path, jobs: Jobs):
    """align_si.sh (or for a SAT system align_fmllr.sh): the final model's alignments of `data`
    into out_dir/ali.N.gz; returns (shares, result, seconds, the projection aligned with)."""
    num_shares = prepare_shares(jobs, data, work_dir, cfg, lang, system.tm, system.tree)
    projection = system.projection
    trainer = Trainer(jobs, num_shares, work_dir, out_dir, projection, tuple(lang.silence_phones))
    opts = align_opts(cfg, cfg.beam)
    started = time.perf_counter()
    if projection.adapted:
        speakers = {data.utt2spk.get(u, u) for u in data.utts}
        transforms = projection.speaker_transforms
        if not speakers <= set(transforms):
            transforms = speaker_transforms(trainer, system, data, opts).transforms
        projection = trainer.projection = replace(projection, speaker_transforms=transforms, utt2spk=data.utt2spk)
    result = trainer.run_pass("align", system.tm, system.am, opts, accumulate=False)
    seconds = time.perf_counter() - started
    audio = sum(data.frames.values()) / 100.0
    log.info(
        "aligned %d of %d utterances (%d failed, %d retried) in %.1f s: %.4f real-time (%.1f s of audio)",
        result.aligned,
        len(data.utts),
        len(result.failed),
        result.retried,
        seconds,
        seconds / audio,
        audio,
    )
    return num_shares, result, seconds, projection


def speaker_transforms(trainer: Trainer, system: System, data: TrainingData, opts: AlignOptions):
    """align_fmllr.sh's first half for speakers without a transform: the speaker-independent
    model aligns the unadapted features, then each speaker's fMLLR is estimated under the final
    model on that alignment (silence weighted 0)."""
    trainer.projection = replace(system.projection, speaker_transforms={}, utt2spk=data.utt2spk)
    trainer.run_pass("align", system.tm, system.align_am, opts, accumulate=False)
    gathered = trainer.run_pass("read", system.tm, system.am, opts, gather=("fmllr",))
    estimated = estimate_transforms(gathered.speakers, {}, system.am.dim)
    log.info(
        "fMLLR of %d speakers from the speaker-independent alignment: %d estimated, auxiliary function +%.3f per frame",
        len(estimated.transforms),
        estimated.updated,
        estimated.aux_gain_per_frame,
    )
    return estimated


def pass_lines(summary: dict) -> str:
    """log/train.log: one line per EM pass, then the alignment and boundary results."""
    lines = [
        f"pass {p['iteration']:2d}{' realigned' if p['aligned'] else '          '}  log-likelihood/frame "
        f"{p['log_like_per_frame']:.4f}  frames {p['frames']}  gaussians {p['num_gauss']}  failed {p['failed']}  "
        f"{p['seconds']:.1f} s (alignment {p['align_seconds']:.1f} s)"
        for p in summary["passes"]
    ]
    rest = {k: v for k, v in summary.items() if k != "passes"}
    return "\n".join([*lines, json.dumps(rest)]) + "\n"


def write_outputs(out: Path, system: System, num_shares: int, summary: dict, made_from: MadeFrom) -> None:
    write_text(out / "log" / "train.log", pass_lines(summary))
    write_model(out / "final.mdl", system.tm, system.am)
    if system.align_am is not None:
        write_model(out / "final.alimdl", system.tm, system.align_am)
    system.projection.save(out)
    system.tree.write(binary=True, filename=str(out / "tree"))
    write_text(out / "num_jobs", f"{num_shares}\n")
    write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    write_record(out, STAGE, RERUN, *made_from, outputs_of(out))


def run_gmm_training(
    cfg: Any,
    lang,
    train: TrainingData,
    align: TrainingData | None,
    out_dir: Path,
    made_from: MadeFrom,
    boundary_report: Callable | None = None,
    trainer: Callable | None = None,
) -> dict:
    """The whole stage into out_dir, atomically; `trainer` makes the System (default: kind
    mono or tri; the transformed kinds' are in asr/gmm/transformed.py)."""
    gmm = cfg.gmm
    if trainer is None:
        trainer = train_mono if gmm.kind == "mono" else train_tri
    with atomic_dir(out_dir) as tmp, make_jobs(gmm, tmp) as jobs:
        work = tmp / "work"
        work.mkdir()
        started = time.perf_counter()
        system = trainer(gmm, lang, train, work, tmp, jobs)
        summary: dict[str, Any] = {
            "kind": gmm.kind,
            "train_utterances": len(train.utts),
            "train_frames": sum(train.frames.values()),
            "passes": [vars(p) for p in system.history],
            "train_seconds": time.perf_counter() - started,
            "num_pdfs": system.am.num_pdfs,
            "num_gauss": system.am.num_gauss,
            **system.summary,
        }
        if align is not None:
            for stale in tmp.glob("ali.*.gz"):
                stale.unlink()
            shutil.rmtree(work)
            work.mkdir()
            num_shares, result, seconds, system.projection = align_set(gmm, lang, align, system, work, tmp, jobs)
            audio = sum(align.frames.values()) / 100.0
            summary.update(
                align_utterances=len(align.utts),
                align_failed=len(result.failed),
                align_seconds=seconds,
                align_real_time_factor=seconds / audio,
            )
        else:
            num_shares = len(list(tmp.glob("ali.*.gz")))
        if boundary_report is not None:
            summary["boundaries"] = boundary_report(tmp, system.tm)
        shutil.rmtree(work)
        write_outputs(tmp, system, num_shares, summary, made_from)
    return summary


def load_system(model_dir: Path, delta_order: int, utt2spk: dict[str, str] | None = None) -> System:
    """A trained system's dir as a System (the SAT speakers' transforms with `utt2spk`)."""
    model_dir = Path(model_dir)
    for name in ("final.mdl", "tree"):
        if not (model_dir / name).is_file():
            raise InputError(f"{model_dir}: no {name}; point gmm.alignments at a trained GMM dir (e.g. exp/tri1)")
    tm, am = read_model(model_dir / "final.mdl")
    align_am = read_model(model_dir / "final.alimdl")[1] if (model_dir / "final.alimdl").is_file() else None
    projection = Projection.load(model_dir, delta_order, utt2spk if align_am is not None else None)
    return System(load_context_dependency(model_dir / "tree"), tm, am, [], projection, align_am)


def run_gmm_alignment(
    cfg: Any, lang, align: TrainingData, out_dir: Path, made_from: MadeFrom, boundary_report: Callable | None = None
) -> dict:
    """kind=align, align_si.sh on another set: the model of the gmm.alignments dir (its
    final.mdl and tree, copied) aligns `align` into out_dir/ali.N.gz, atomically (with
    gmm.phone_timings, scored against them as training's alignments are)."""
    gmm, source = cfg.gmm, Path(cfg.gmm.alignments)
    system = load_system(source, gmm.delta_order, {})
    with atomic_dir(out_dir) as tmp, make_jobs(gmm, tmp) as jobs:
        work = tmp / "work"
        work.mkdir()
        num_shares, result, seconds, system.projection = align_set(gmm, lang, align, system, work, tmp, jobs)
        summary = {
            "kind": "align",
            "model": str(source),
            "passes": [],
            "align_utterances": len(align.utts),
            "align_failed": len(result.failed),
            "align_seconds": seconds,
            "align_real_time_factor": seconds / (sum(align.frames.values()) / 100.0),
        }
        if boundary_report is not None:
            summary["boundaries"] = boundary_report(tmp, system.tm)
        shutil.rmtree(work)
        write_outputs(tmp, system, num_shares, summary, made_from)
    return summary
