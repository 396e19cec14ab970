"""GMM-HMM systems on transformed features, as Kaldi's steps/train_lda_mllt.sh and train_sat.sh.

LDA+MLLT (`kind: lda_mllt`, s5c's tri3): the statics (13 MFCCs) spliced +-splice_context,
projected to lda_dim by LDA whose classes are the tied states (pdfs) of the previous system's
alignment (silence left out); a tree grown in that space from those alignments; then EM as for
triphones, where at each of `mllt_iters` an MLLT (semi-tied covariance) is estimated under the
current model on non-silence frames, the means rotated by it and it composed into the matrix.

SAT (`kind: sat`, s5c's tri4): on the LDA+MLLT system's matrix and alignments, each training
speaker's fMLLR transform estimated under that system's model (or, from a SAT system, its
transforms taken as they are, as train_sat.sh does with an alignment dir's trans.*), the tree
grown on the adapted features, EM, and at each of `fmllr_iters` every speaker's transform
re-estimated under the current model. Last, the speaker-independent alignment model
(final.alimdl: the model's posteriors on the adapted frames, means and variances re-estimated on
the unadapted ones) for the first decoding pass.

The previous system's alignments are carried to the new tree by aligning with the new model in
the first pass (as asr/gmm/train.py's triphones do).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import kaldi_hmm_gmm as khg
import numpy as np

from asr.features.lda_mllt_update import estimate_lda, mllt_aux, update_mllt
from asr.gmm.adaptation import estimate_transforms, merge_lda, mllt_stats
from asr.gmm.frontend import Projection
from asr.gmm.shares import LdaSpec, share_lda_stats, share_utterances
from asr.gmm.stats import ModelArrays, update
from asr.gmm.train import (
    Jobs,
    System,
    Trainer,
    TrainingData,
    align_opts,
    em_pass,
    init_from_tree,
    load_system,
    prepare_shares,
    read_alignments,
    tree_stats,
)
from asr.utils.errors import InputError

log = logging.getLogger("asr.gmm")


def previous_system(cfg: Any, data: TrainingData) -> tuple[System, dict]:
    source = Path(cfg.alignments)
    if not source.is_dir():
        raise InputError(f"gmm.alignments={source}: no such dir; train the system it names first")
    return load_system(source, cfg.delta_order, data.utt2spk), read_alignments(source)


def monophone_tree(lang):
    topo = lang.topology()
    return khg.monophone_context_dependency(
        phones=topo.phones, phone2num_pdf_classes=topo.get_phone_to_num_pdf_classes()
    )


def lda_matrix(
    cfg: Any, jobs: Jobs, num_shares: int, work_dir: Path, alignments: dict, old: System, lang
) -> np.ndarray:
    """acc-lda + est-lda: the (lda_dim, spliced dim) projection, classes the old pdfs."""
    specs = []
    for i in range(1, num_shares + 1):
        kept = {u: alignments[u] for u, _ in share_utterances(work_dir, i) if u in alignments}
        specs.append(LdaSpec(i, work_dir, kept, old.tm, list(lang.silence_phones), cfg.splice_context))
    parts = [p for p in jobs.map(share_lda_stats, specs) if p is not None]
    if not parts:
        raise InputError(f"gmm.alignments={cfg.alignments}: no aligned non-silence frame to estimate LDA from")
    stats = merge_lda(parts)
    spliced_dim = stats.first.shape[1]
    if cfg.lda_dim > spliced_dim:
        raise InputError(f"gmm.lda_dim={cfg.lda_dim}: more than the {spliced_dim} dims of the spliced frames")
    matrix, eigenvalues = estimate_lda(stats, cfg.lda_dim)
    log.info(
        "LDA %d -> %d on %d classes (the pdfs of %s): eigenvalues %.2f .. %.2f kept, %.3f first dropped",
        spliced_dim,
        cfg.lda_dim,
        int((stats.occupancy > 0).sum()),
        cfg.alignments,
        eigenvalues[0],
        eigenvalues[cfg.lda_dim - 1],
        eigenvalues[cfg.lda_dim] if len(eigenvalues) > cfg.lda_dim else float("nan"),
    )
    return matrix


def transform_means(am, transform: np.ndarray) -> None:
    """gmm-transform-means: every Gaussian's mean x -> T x (variances kept until the next update)."""
    for pdf in range(am.num_pdfs):
        gmm = am.get_pdf(pdf)
        gmm.set_means(np.asarray(gmm.means, np.float64) @ transform.T)
    am.compute_gconsts()


def new_tree_system(cfg, lang, data, work_dir, jobs, num_shares, alignments, old: System, projection: Projection):
    """The tree on the new features from the old alignments, its model, its training graphs."""
    stats = tree_stats(jobs, num_shares, work_dir, alignments, old.tm, lang.silence_phones, projection)
    built, tm, am = init_from_tree(cfg, lang, stats)
    prepare_shares(jobs, data, work_dir, cfg, lang, tm, built.ctx_dep, feats=False)
    return built.ctx_dep, tm, am


def em_schedule(cfg, am, trainer: Trainer, tm, estimate_transform) -> None:
    """EM passes 1 .. num_iters-1 (realigning at the first and at realign_iters), with the
    transform re-estimated first at the passes `estimate_transform` is asked for."""
    num_gauss = max(am.num_gauss, cfg.num_leaves)
    increment = max(0, (cfg.total_gauss - num_gauss) // max(cfg.max_iter_inc, 1))
    mixing = dict(min_gaussian_occupancy=cfg.min_gaussian_occupancy, power=cfg.power)
    opts = align_opts(cfg, cfg.beam)
    for iteration in range(1, cfg.num_iters):
        mode = "align" if iteration == 1 or iteration in set(cfg.realign_iters) else "read"
        if estimate_transform(iteration, mode, opts):
            mode = "read"  # the transform's pass aligned already
        em_pass(trainer, iteration, mode, tm, am, opts, mixup_to=num_gauss, **mixing)
        if iteration <= cfg.max_iter_inc:
            num_gauss += increment


def train_lda_mllt(cfg: Any, lang, data: TrainingData, work_dir: Path, out_dir: Path, jobs: Jobs) -> System:
    old, alignments = previous_system(cfg, data)
    num_shares = prepare_shares(jobs, data, work_dir, cfg, lang, old.tm, monophone_tree(lang), graphs=False)
    projection = Projection(
        splice=cfg.splice_context, matrix=lda_matrix(cfg, jobs, num_shares, work_dir, alignments, old, lang)
    )
    tree, tm, am = new_tree_system(cfg, lang, data, work_dir, jobs, num_shares, alignments, old, projection)
    trainer = Trainer(jobs, num_shares, work_dir, out_dir, projection, tuple(lang.silence_phones))
    mllt_gains: list[float] = []

    def estimate_mllt(iteration: int, mode: str, opts) -> bool:
        if iteration not in set(cfg.mllt_iters):
            return False
        gathered = trainer.run_pass(mode, tm, am, opts, gather=("mllt",))
        stats = mllt_stats(gathered.mllt, ModelArrays.of(am))
        trace: list[float] = []
        mllt = update_mllt(stats, trace=trace)
        gain = (trace[-1] - mllt_aux(np.eye(len(mllt)), stats)) / max(stats.beta, 1.0)
        mllt_gains.append(gain)
        transform_means(am, mllt)
        trainer.projection = replace(trainer.projection, matrix=mllt @ trainer.projection.matrix)
        log.info(
            "pass %d: MLLT estimated on %.0f frames, auxiliary function +%.4f per frame", iteration, stats.beta, gain
        )
        return True

    em_schedule(cfg, am, trainer, tm, estimate_mllt)
    system = System(tree, tm, am, trainer.history, trainer.projection)
    system.summary = {"lda_dim": cfg.lda_dim, "splice_context": cfg.splice_context, "mllt_gain_per_frame": mllt_gains}
    return system


def train_sat(cfg: Any, lang, data: TrainingData, work_dir: Path, out_dir: Path, jobs: Jobs) -> System:
    old, alignments = previous_system(cfg, data)
    if old.projection.matrix is None:
        raise InputError(
            f"gmm.alignments={cfg.alignments}: no final.mat; SAT starts from an LDA+MLLT system (gmm=lda_mllt)"
        )
    num_shares = prepare_shares(jobs, data, work_dir, cfg, lang, old.tm, monophone_tree(lang), graphs=False)
    silence = tuple(lang.silence_phones)
    projection = replace(old.projection, speaker_transforms={}, utt2spk=dict(data.utt2spk))
    trainer = Trainer(jobs, num_shares, work_dir, out_dir, projection, silence)
    opts = align_opts(cfg, cfg.beam)
    dim = old.am.dim
    gains: list[float] = []

    def estimate_fmllr(tm, am, mode: str, given: dict | None = None) -> None:
        gathered = trainer.run_pass(mode, tm, am, opts, gather=("fmllr",), given=given)
        estimated = estimate_transforms(gathered.speakers, trainer.projection.speaker_transforms, dim)
        trainer.projection = replace(trainer.projection, speaker_transforms=estimated.transforms)
        gains.append(estimated.aux_gain_per_frame)
        log.info(
            "fMLLR of %d speakers: %d estimated, auxiliary function +%.4f per frame",
            len(gathered.speakers),
            estimated.updated,
            estimated.aux_gain_per_frame,
        )

    if old.projection.speaker_transforms:  # a SAT system's own, as train_sat.sh takes an alignment dir's trans.*
        trainer.projection = replace(trainer.projection, speaker_transforms=dict(old.projection.speaker_transforms))
    else:  # under the LDA+MLLT system, on its alignments
        estimate_fmllr(old.tm, old.am, "given", alignments)
    tree, tm, am = new_tree_system(cfg, lang, data, work_dir, jobs, num_shares, alignments, old, trainer.projection)

    def reestimate(iteration: int, mode: str, _opts) -> bool:
        if iteration not in set(cfg.fmllr_iters):
            return False
        estimate_fmllr(tm, am, mode)
        return True

    em_schedule(cfg, am, trainer, tm, reestimate)
    align_am = alignment_model(trainer, tm, am, opts)
    system = System(tree, tm, am, trainer.history, trainer.projection, align_am)
    system.summary = {"speakers": len(trainer.projection.speaker_transforms), "fmllr_gain_per_frame": gains}
    return system


def alignment_model(trainer: Trainer, tm, am, opts):
    """final.alimdl: posteriors from the adapted frames under the final model, means and
    variances re-estimated from the unadapted frames (gmm-acc-stats-twofeats, gmm-est
    --update-flags=mv --remove-low-count-gaussians=false)."""
    align_am = khg.AmDiagGmm()
    align_am.copy_from_am_diag_gmm(am)
    gathered = trainer.run_pass("read", tm, am, opts, gather=("twofeats",))
    update(align_am, tm, gathered.stats, ModelArrays.of(am), flags="mv", remove_low_count=False)
    return align_am
