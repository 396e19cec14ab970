"""The sweep in the paper's regime: frame_ce on fixed-length samples (train.chunk_frames), the
batches counted in samples, on the hybrid toy corpus."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.fixtures.hybrid_corpus import (
    hmm_system,
    hybrid_overrides,
    text_transition_model,
    write_ali_gz,
    write_hybrid_set,
)

from asr.config import load_config
from asr.sweep.report import write_report
from asr.sweep.run import SweepData, epoch_plan, run_settings, train_run, with_train_config
from asr.sweep.sweep import run_sweep
from asr.utils.errors import InputError

torch.set_num_threads(1)
CHUNK = 8  # toy utterances have 12-90 frames; model.subsample=2 in hybrid_overrides
SWEEP = [
    "sweep=ctc",  # the base preset; the sweep here sets its own samples (+sweep.train.chunk_frames)
    "sweep.learners=4",
    "sweep.learners_per_node=2",
    "sweep.base_batch=8",
    "sweep.global_batches=[8,16]",
    "sweep.epochs=2",
    "sweep.baseline_lrs=[0.05,0.1]",
    "sweep.critical_batch=16",
    "sweep.critical_lrs=[0.1]",
    "sweep.num_layers=0",
    "sweep.hidden_size=0",
    "sweep.jobs=1",
    "sweep.seeds=[1]",
    "sweep.extra_seeds=[2,3]",
    "sweep.algorithms=[ssgd,adpsgd]",
    "sweep.max_train_utts=0",
    f"+sweep.train.chunk_frames={CHUNK}",
]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep_samples")
    train_tids, _ = write_hybrid_set(root, "train", 48, seed=1)
    dev_tids, _ = write_hybrid_set(root, "dev", 12, seed=2)
    write_hybrid_set(root, "eval", 6, seed=3)
    write_ali_gz(root / "ali" / "ali.1.gz", {**train_tids, **dev_tids})
    (root / "ali" / "final.mdl").write_text(text_transition_model(*hmm_system()))
    return root


def sweep_config(root, extra=()):
    return load_config(hybrid_overrides(root, [*SWEEP, f"sweep.out_dir={root / 'sweep'}", *extra]))


@pytest.fixture(scope="module")
def data(root):
    return SweepData(with_train_config(sweep_config(root)))


def test_every_batch_is_full_and_every_kept_sample_trains_once_an_epoch(data):
    assert (
        data.chunked
        and data.num_items % 16 == 0
        and 0 <= data.dropped < 16
        and data.num_items + data.dropped == len(data.train)
    )
    for seed, epoch in ((1, 0), (1, 1), (2, 0)):
        sampler = data.sampler(per_learner_batch=2, learners=4, seed=seed)
        data.set_epoch(epoch)
        plan = epoch_plan(sampler, epoch, 4)
        assert all(len(shard) == 2 for batch in plan for shard in batch)
        drawn = np.concatenate([shard for batch in plan for shard in batch])
        assert sorted(drawn.tolist()) == list(range(data.num_items))
        assert data.train.seed == seed  # the run's own offsets


def test_a_shard_is_samples_of_chunk_frames_with_their_targets(data, root):
    from asr.models.blstm import build_model

    cfg = with_train_config(sweep_config(root))
    torch.manual_seed(0)
    model = build_model(cfg.model, data.train.feat_dim, data.objective.num_outputs)
    loss, count = data.loss(model, [np.array([0, 5]), np.array([7])])
    assert count == 3 * CHUNK // 2 and torch.isfinite(loss)
    held_out = data.held_out_loss(model)
    assert np.isfinite(held_out) and len(data.dev) == sum(n // CHUNK for n in data.dev.utterances.num_frames)


@pytest.mark.parametrize("algorithm", ["adpsgd", "hadpsgd"])
def test_a_run_with_its_nodes_batched_trains_what_each_node_alone_trains(root, data, algorithm):
    """Speeds, jitter and an exchange time: nodes end steps at different times, so each
    batched call holds the steps in flight, not a lockstep round."""
    cfg = with_train_config(sweep_config(root, ["sweep.exchange_time=0.3", "sweep.speed_spread=0.3"]))
    settings = run_settings(cfg, algorithm, 16, 0.1, seed=2)
    runs, default = {}, data.batched_nodes
    for batched in (False, True):
        data.batched_nodes = batched
        runs[batched] = train_run(data, settings)
    data.batched_nodes = default
    alone, together = runs[False]["epochs_log"], runs[True]["epochs_log"]
    assert [e["steps"] for e in together] == [e["steps"] for e in alone]
    for key in ("train_loss", "held_out_loss", "train_slice_loss", "spread"):
        assert [e[key] for e in together] == pytest.approx([e[key] for e in alone], rel=1e-4), key


def test_the_sweep_counts_its_batches_in_samples(root):
    cfg = sweep_config(root)
    result = run_sweep(cfg)
    written = json.loads((Path(cfg.sweep.out_dir) / "sweep.json").read_text())
    samples = written["setup"]["train_samples"]
    assert samples and samples % 16 == 0 and written["setup"]["train"]["chunk_frames"] == CHUNK
    for r in result.runs:
        assert r["steps_per_epoch"] == samples // r["global_batch"] and r["train_samples"] == samples
    write_report(result, Path(cfg.sweep.out_dir))
    assert f"training samples of {CHUNK} frames" in (Path(cfg.sweep.out_dir) / "sweep.md").read_text()


def test_samples_need_the_frame_objective(root):
    cfg = load_config(hybrid_overrides(root, [*SWEEP, "train.objective=ctc", f"sweep.out_dir={root / 'ctc'}"]))
    with pytest.raises(InputError, match="train.chunk_frames=8 cuts frame-level samples"):
        SweepData(with_train_config(cfg))


def test_too_few_samples_for_one_batch_is_an_error(root):
    cfg = sweep_config(root, ["sweep.max_train_utts=1"])
    with pytest.raises(InputError, match="fewer than one batch of 16"):
        SweepData(with_train_config(cfg))


def test_the_frames_preset_is_the_papers_regime():
    """conf/sweep/frames.yaml: frame_ce on 21-frame samples, at least 8 samples per learner at
    the smallest batch, batches to 32x it, and settings that fit together (sweep.check)."""
    from asr.sweep.run import train_config
    from asr.sweep.sweep import check

    cfg = load_config(["experiment=hybrid_ce", "sweep=frames"])
    check(cfg)
    scfg, train = cfg.sweep, train_config(cfg)
    assert train.objective == "frame_ce" and train.chunk_frames == 21 and cfg.model.head == "frame_ce"
    assert (
        train.alignments.endswith("phone_ali/train/pdf.1.gz") and train.optimizer == "sgd"
    )  # the default's overrides kept
    smallest = min(scfg.global_batches)
    assert scfg.base_batch == smallest and smallest // scfg.learners >= 8 and max(scfg.global_batches) >= 32 * smallest
    assert scfg.critical_batch in scfg.global_batches


def test_the_figure1_preset_sees_no_sample_more_than_16_times_on_grids_1_5x_apart():
    """conf/sweep/figure1.yaml: every utterance's samples, 16 epochs of one pass each, the lr
    x 1/sqrt(2) an epoch, batch and lr grids 1.5x apart (batches 1.5 and 4/3 alternately)."""
    from asr.sweep.sweep import check

    cfg = load_config(["experiment=hybrid_ce", "sweep=figure1"])
    check(cfg)
    scfg = cfg.sweep
    assert scfg.budget == "epochs" and scfg.epochs == 16 and scfg.max_train_utts == 0
    assert cfg.sweep.train.lr_decay == pytest.approx(2**-0.5)
    steps = [b / a for a, b in zip(scfg.global_batches, scfg.global_batches[1:])]
    assert all(s == pytest.approx(1.5) or s == pytest.approx(4 / 3) for s in steps)
    ratios = [b / a for a, b in zip(scfg.critical_lrs, scfg.critical_lrs[1:])]
    assert ratios == pytest.approx([1.5] * (len(scfg.critical_lrs) - 1))
    assert 1.6 in scfg.baseline_lrs and 1.6 * scfg.critical_batch / scfg.base_batch in scfg.critical_lrs
    assert scfg.base_batch == min(scfg.global_batches) and scfg.base_batch // scfg.learners >= 16


def test_the_default_sweep_is_figure1s_regime_at_a_cpus_scale():
    """conf/sweep/default.yaml: figure1's schedule and 1.5x grids on 4,096 utterances' samples,
    12 epochs; without the frame objective it says which experiment to add."""
    from asr.sweep.sweep import check

    with pytest.raises(InputError, match="add experiment=hybrid_ce model.num_pdfs=N .* or sweep=ctc"):
        check(load_config([]))
    cfg = load_config(["experiment=hybrid_ce"])
    check(cfg)
    scfg, figure1 = cfg.sweep, load_config(["experiment=hybrid_ce", "sweep=figure1"]).sweep
    assert scfg.budget == "epochs" and scfg.epochs == 12 and scfg.max_train_utts == 4096
    assert scfg.train == figure1.train and scfg.warmup_epochs == figure1.warmup_epochs
    assert list(scfg.algorithms) == ["ssgd", "adpsgd", "hadpsgd"] and scfg.learners == 16
    for grid in (scfg.global_batches, scfg.baseline_lrs, scfg.critical_lrs):
        steps = [b / a for a, b in zip(grid, grid[1:])]
        assert all(s == pytest.approx(1.5) or s == pytest.approx(4 / 3) for s in steps), grid
    assert scfg.base_batch == min(scfg.global_batches) and scfg.critical_batch in scfg.global_batches


def test_an_updates_budget_gives_every_batch_the_baselines_updates(root):
    cfg = sweep_config(root, ["sweep.budget=updates", f"sweep.out_dir={root / 'updates'}"])
    result = run_sweep(cfg)
    samples = result.setup["train_samples"]
    by_batch = {r["global_batch"]: r for r in result.runs if r["algorithm"] != "baseline"}
    base = samples // 8  # the baseline's updates per epoch (base batch 8)
    for batch, run in by_batch.items():
        assert run["passes"] == batch // 8 and run["steps_per_epoch"] == base
        nodes = 1 if run["algorithm"] == "ssgd" else 4  # ADPSGD: each of the 4 learners is a node
        assert sum(run["epochs_log"][0]["steps"]) == base * nodes
    write_report(result, Path(cfg.sweep.out_dir))
    written = json.loads((Path(cfg.sweep.out_dir) / "sweep.json").read_text())
    assert written["budget"].startswith("every run makes the baseline's updates")
    assert "an epoch: batch / 8 passes over the samples" in (Path(cfg.sweep.out_dir) / "sweep.md").read_text()
    # the regime in the header: at the largest batch (16) each sample is seen 2 x 16 / 8 times
    assert written["setup"]["regime"] | {"lr_schedule": None} == {
        "train_items": samples,
        "unit": "samples",
        "epochs": 2,
        "largest_batch": 16,
        "visits_per_item_at_largest_batch": 4,
        "updates_at_largest_batch": 4 * (samples // 16),
        "lr_schedule": None,
    }


def test_an_updates_budget_needs_batches_that_are_multiples_of_the_base(root):
    cfg = sweep_config(root, ["sweep.budget=updates", "sweep.global_batches=[8,12]", "sweep.learners=4"])
    with pytest.raises(InputError, match="sweep.budget=updates: global batch 12 is not a multiple"):
        run_sweep(cfg)
