"""The diagnostic runs (asr/sweep/diagnose) on the hybrid toy corpus: each variant changes
what it says, every learner's own held-out loss is recorded, and the rows compare each run
with its SSGD reference and the baseline of its seed."""

import json
from dataclasses import replace
import math
import shutil
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from tests.sweep.test_sweep_samples import SWEEP, root, sweep_config  # noqa: F401  (root: the corpus fixture)

from asr.sweep.diagnose.diagnostics import NO_MOMENTUM, Diagnostic, diagnostics_md, run_diagnostics
from asr.sweep.sweep import run_sweep
from asr.utils.errors import InputError

torch.set_num_threads(1)
DIAGNOSTICS = (
    Diagnostic("ssgd", "ssgd", "reference", "SSGD"),
    Diagnostic("adpsgd", "adpsgd", "reference", "ADPSGD"),
    Diagnostic("adpsgd_lockstep", "adpsgd", "staleness", "lockstep", {"speed_spread": 0.0, "exchange_time": 0.0}),
    Diagnostic("adpsgd_2_learners", "adpsgd", "noise", "2 learners", {"learners": 2}),
    Diagnostic("ssgd_momentum_0", "ssgd", "reference", "SSGD momentum 0", NO_MOMENTUM, 10.0),
    Diagnostic("adpsgd_momentum_0", "adpsgd", "momentum", "momentum 0", NO_MOMENTUM, 10.0, "ssgd_momentum_0"),
)


@pytest.fixture(scope="module")
def diagnosed(root):  # noqa: F811
    cfg = sweep_config(root, ["sweep.epochs=1", "sweep.baseline_lrs=[0.1]", f"sweep.out_dir={root / 'diagnose'}"])
    run_sweep(cfg)
    return cfg, run_diagnostics(cfg, DIAGNOSTICS)


def rows(head, name):
    return [r for r in head["diagnostics"] if r["name"] == name]


def test_every_variant_runs_at_both_batches_with_what_it_changes(diagnosed):
    cfg, head = diagnosed
    assert [r["global_batch"] for r in head["diagnostics"]] == [16] * 6 + [8] * 6  # the critical batch first
    for batch, lr in ((16, 0.2), (8, 0.1)):  # lr 0.1 at the base batch 8, scaled linearly
        by_name = {r["name"]: r for r in head["diagnostics"] if r["global_batch"] == batch}
        assert math.isclose(by_name["adpsgd"]["lr"], lr) and math.isclose(by_name["adpsgd_momentum_0"]["lr"], 10 * lr)
        assert by_name["adpsgd"]["learners"] == 4 and by_name["adpsgd_2_learners"]["learners"] == 2
        assert by_name["adpsgd_2_learners"]["per_learner_batch"] == batch // 2
        assert by_name["adpsgd"]["nodes"] == 4 and by_name["ssgd"]["nodes"] == 1
    runs = json.loads((Path(cfg.sweep.out_dir) / "diagnostics.json").read_text())["runs"]
    lockstep = next(r for r in runs if r["timing"]["exchange_time"] == 0.0)
    assert lockstep["timing"]["speed_spread"] == 0.0 and lockstep["algorithm"] == "adpsgd"
    still = next(r for r in runs if r["train"]["momentum"] == 0.0 and r["algorithm"] == "adpsgd")
    assert still["train"]["nesterov"] is False


def test_each_learner_is_scored_and_rows_compare_with_their_reference(diagnosed):
    _, head = diagnosed
    for batch in (8, 16):
        adpsgd = next(r for r in rows(head, "adpsgd") if r["global_batch"] == batch)
        ssgd = next(r for r in rows(head, "ssgd") if r["global_batch"] == batch)
        assert adpsgd["over_reference"] == pytest.approx(adpsgd["held_out_loss"] / ssgd["held_out_loss"] - 1)
        assert ssgd["over_reference"] is None
        still = next(r for r in rows(head, "adpsgd_momentum_0") if r["global_batch"] == batch)
        assert still["reference"] == "ssgd_momentum_0"
        last = adpsgd["epochs"][-1]
        assert last["learners_best"] <= last["learners_mean"] <= last["learners_worst"]
        assert last["spread"] > 0  # ADPSGD's learners differ
    lockstep = rows(head, "adpsgd_lockstep")[0]
    assert lockstep["consensus_rate"] == pytest.approx(0.5)  # the fixed ring on 4 nodes


def test_an_ssgd_learner_scores_what_the_average_scores(root):  # noqa: F811
    """SSGD's one node is its learners' average: its own held-out loss is the same number,
    so the learners' losses are of the learners' models, not of anything else."""
    from asr.sweep.run import SweepData, run_settings, train_run, with_train_config

    cfg = with_train_config(sweep_config(root, ["sweep.epochs=1"]))
    data = SweepData(cfg)
    ssgd = train_run(data, run_settings(cfg, "ssgd", 8, 0.1, 1), learner_losses=True)
    assert ssgd["epochs_log"][0]["learner_held_out"] == [ssgd["held_out_loss"]]
    adpsgd = train_run(data, run_settings(cfg, "adpsgd", 8, 0.1, 1), learner_losses=True)
    losses = adpsgd["epochs_log"][0]["learner_held_out"]
    assert len(losses) == 4 and len(set(losses)) == 4
    assert "learner_held_out" not in train_run(data, run_settings(cfg, "ssgd", 8, 0.1, 1))["epochs_log"][0]


def test_the_markdown_names_every_run(diagnosed):
    _, head = diagnosed
    text = diagnostics_md(head)
    assert text.count("| adpsgd_lockstep |") == 2 and "python -m asr.sweep.diagnose" in text


def test_a_chosen_diagnostic_brings_its_reference_and_unknown_names_are_refused(root):  # noqa: F811
    from asr.sweep.diagnose.diagnostics import chosen

    cfg = sweep_config(root, ["sweep.diagnostics=[adpsgd_momentum_0]"])
    assert [d.name for d in chosen(cfg, DIAGNOSTICS)] == ["ssgd_momentum_0", "adpsgd_momentum_0"]
    assert len(chosen(sweep_config(root), DIAGNOSTICS)) == len(DIAGNOSTICS)
    with pytest.raises(InputError, match=r"sweep.diagnostics: \['adpsgd_fast'\] unknown"):
        chosen(sweep_config(root, ["sweep.diagnostics=[adpsgd_fast]"]), DIAGNOSTICS)


def test_the_batches_can_be_chosen(root):  # noqa: F811
    from asr.sweep.diagnose.diagnostics import diagnostic_batches

    assert diagnostic_batches(sweep_config(root).sweep) == [16, 8]
    assert diagnostic_batches(sweep_config(root, ["sweep.diagnostic_batches=[8]"]).sweep) == [8]
    with pytest.raises(InputError, match="sweep.diagnostic_batches: 6 is not a multiple of sweep.learners=4"):
        diagnostic_batches(sweep_config(root, ["sweep.diagnostic_batches=[6]"]).sweep)


def test_diagnostics_need_the_sweeps_baseline(root):  # noqa: F811
    cfg = sweep_config(root, [f"sweep.out_dir={root / 'nothing'}"])
    with pytest.raises(InputError, match="run python -m asr.sweep with the same overrides first"):
        run_diagnostics(cfg, DIAGNOSTICS)


SEPARATING = (
    Diagnostic("ssgd", "ssgd", "reference", "SSGD"),
    Diagnostic("adpsgd", "adpsgd", "reference", "ADPSGD"),
    Diagnostic("ssgd_batch_x2", "ssgd", "reference", "SSGD at 2x", batch_factor=2.0),
    Diagnostic(
        "adpsgd_batch_x2", "adpsgd", "per-learner batch", "2x a learner", reference="ssgd_batch_x2", batch_factor=2.0
    ),
    Diagnostic("ssgd_batch_div2", "ssgd", "reference", "SSGD at 1/2", batch_factor=0.5),
    Diagnostic(
        "adpsgd_2_learners_batch_div2",
        "adpsgd",
        "nodes",
        "2 learners at the same samples each",
        {"learners": 2},
        reference="ssgd_batch_div2",
        batch_factor=0.5,
    ),
)


def test_a_batch_factor_changes_the_global_batch_but_not_the_lr_and_compares_at_its_own_batch(diagnosed, tmp_path):
    """The runs that separate the per-learner batch from the number of nodes: 4 learners at 2x
    the samples each, and 2 learners at the same samples each, at the diagnostic batch's lr,
    each against SSGD at its own global batch and that lr."""
    cfg, _ = diagnosed
    out = tmp_path / "separate"
    out.mkdir()
    (out / "sweep.json").write_text((Path(cfg.sweep.out_dir) / "sweep.json").read_text())  # its baseline
    cfg = OmegaConf.merge(cfg, {"sweep": {"out_dir": str(out), "diagnostic_batches": [8]}})
    head = run_diagnostics(cfg, SEPARATING)
    by_name = {r["name"]: r for r in head["diagnostics"]}
    assert {r["diagnostic_batch"] for r in by_name.values()} == {8}
    shapes = {name: (r["global_batch"], r["learners"], r["per_learner_batch"]) for name, r in by_name.items()}
    assert shapes["adpsgd"] == (8, 4, 2) and shapes["adpsgd_batch_x2"] == (16, 4, 4)
    assert shapes["adpsgd_2_learners_batch_div2"] == (4, 2, 2) and shapes["ssgd_batch_div2"] == (4, 4, 1)
    assert len({r["lr"] for r in by_name.values()}) == 1  # the batch-8 lr everywhere
    for name, reference in (("adpsgd_batch_x2", "ssgd_batch_x2"), ("adpsgd_2_learners_batch_div2", "ssgd_batch_div2")):
        run, ref = by_name[name], by_name[reference]
        assert ref["global_batch"] == run["global_batch"] and ref["nodes"] == 1
        assert run["over_reference"] == pytest.approx(run["held_out_loss"] / ref["held_out_loss"] - 1)
    assert by_name["ssgd_batch_x2"]["held_out_loss"] != by_name["ssgd"]["held_out_loss"]  # another run indeed
    assert "| adpsgd_batch_x2 | per-learner batch | 2x a learner | 16 | 4 | 4 |" in diagnostics_md(head)


def test_a_run_of_some_diagnostics_keeps_the_others_runs_in_the_json(diagnosed, tmp_path):
    """Diagnostics are run a few at a time into one diagnostics.json: a later run of one of them
    must not drop the runs of the others (it did, and they had to be trained again)."""
    cfg, _ = diagnosed
    out = tmp_path / "again"
    shutil.copytree(cfg.sweep.out_dir, out)
    before = json.loads((out / "diagnostics.json").read_text())["runs"]
    cfg = OmegaConf.merge(cfg, {"sweep": {"out_dir": str(out), "diagnostics": ["adpsgd_lockstep"]}})
    head = run_diagnostics(cfg, DIAGNOSTICS)
    assert {r["name"] for r in head["diagnostics"]} == {"ssgd", "adpsgd_lockstep"}
    after = json.loads((out / "diagnostics.json").read_text())["runs"]
    assert len(after) == len(before) and all(run in after for run in before)


def test_a_batch_factor_whose_batch_does_not_tile_the_sweeps_epochs_is_refused(root):  # noqa: F811
    from asr.sweep.diagnose.diagnostics import run_batch

    scfg = sweep_config(root).sweep  # batches 8 and 16: every epoch is full batches of 16
    assert run_batch(scfg, SEPARATING[3], 8) == 16 and run_batch(scfg, SEPARATING[5], 8) == 4
    with pytest.raises(InputError, match=r"16 x 2 \(adpsgd_batch_x2\) is not a multiple of its 4 learners dividing 16"):
        run_batch(scfg, SEPARATING[3], 16)
    with pytest.raises(InputError, match=r"8 x 0.5 \(adpsgd_2_learners_batch_div2\)"):
        run_batch(
            sweep_config(root, ["sweep.learners_per_node=1"]).sweep, replace(SEPARATING[5], sweep={"learners": 8}), 8
        )
