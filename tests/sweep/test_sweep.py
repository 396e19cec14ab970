"""The batch-size sweep on the toy corpus (the quick configuration): the baseline and one run per
(algorithm, global batch), results in JSON with the largest converging batch and the ratio, a
table and a plot, a re-run that trains nothing again, and the same numbers from processes."""

import json
from pathlib import Path

import pytest
import torch

from asr.config import load_config
from asr.sweep.report import write_report
from asr.sweep.sweep import run_sweep
from asr.utils.errors import InputError
from tests.fixtures.toy_corpus import make_toy_experiment, toy_config

torch.set_num_threads(1)
ALGORITHMS = ["ssgd", "adpsgd", "adpsgd_random_ring_delay_by_one", "hadpsgd"]
SWEEP = ["sweep.learners=4", "sweep.learners_per_node=2", "sweep.global_batches=[4,8]", "sweep.base_batch=4", "sweep.epochs=2",
         "sweep.lr=0.05", "sweep.num_layers=0", "sweep.hidden_size=0", "sweep.jobs=1", "sweep.seeds=[1]", "sweep.extra_seeds=[2]",
         f"sweep.algorithms=[{','.join(ALGORITHMS)}]"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep_toy")
    make_toy_experiment(root)
    return root


@pytest.fixture(scope="module")
def swept(root):
    cfg = toy_config(root, SWEEP)
    return cfg, run_sweep(cfg)


def test_a_run_per_algorithm_and_batch_and_the_baseline_with_every_seed(swept):
    cfg, result = swept
    runs = {(r["algorithm"], r["global_batch"], r["seed"]): r for r in result.runs}
    expected = {("baseline", 4, 1), ("baseline", 4, 2)} | {(a, g, 1) for a in ALGORITHMS for g in (4, 8)}
    assert expected <= set(runs)  # and extra seeds where a point came close to the threshold
    for r in result.runs:
        steps_per_epoch = 40 // r["global_batch"]  # 40 training utterances, every batch full
        assert r["steps_per_epoch"] == steps_per_epoch and r["lr"] == pytest.approx(0.05 * r["global_batch"] / 4)
        assert [e["epoch"] for e in r["epochs_log"]] == [1, 2] and not r["diverged"]
        assert r["epochs_log"][1]["held_out_loss"] < r["untrained_loss"]  # learning
        learners = 1 if r["algorithm"] == "baseline" else 4
        nodes = {"baseline": 1, "ssgd": 1, "hadpsgd": 2}.get(r["algorithm"], learners)
        per_node = [e["steps_min"] + e["steps_max"] for e in r["epochs_log"]]  # equal speeds would give 2 x steps_per_epoch
        assert all(s <= 2 * steps_per_epoch * nodes for s in per_node)
    # SSGD over 4 learners at the baseline's batch trains exactly what the baseline trains.
    assert runs[("ssgd", 4, 1)]["held_out_loss"] == pytest.approx(runs[("baseline", 4, 1)]["held_out_loss"], rel=1e-5)


def test_the_json_names_the_largest_converging_batch_and_the_ratio(swept):
    cfg, result = swept
    written = json.loads((Path(cfg.sweep.out_dir) / "sweep.json").read_text())
    verdict = result.verdict
    assert written["largest_converging_batch"] == verdict.largest_converging_batch and set(verdict.largest_converging_batch) == set(ALGORITHMS)
    baseline = written["baseline"]
    assert baseline["seeds"] == [1, 2] and baseline["held_out_loss"] == pytest.approx(sum(baseline["losses"]) / 2)
    by_seed = dict(zip(baseline["seeds"], baseline["losses"]))
    for point in written["points"]:  # each seed compared with the same seed's baseline
        excesses = [loss / by_seed[seed] - 1 for loss, seed in zip(point["losses"], point["seeds"])]
        assert point["excess"] == pytest.approx(sum(excesses) / len(excesses))
        assert point["converges"] == (point["excess"] <= 0.05)
    ssgd, adpsgd = verdict.largest_converging_batch["ssgd"], verdict.largest_converging_batch["adpsgd"]
    assert written["ratio"] == (adpsgd / ssgd if ssgd and adpsgd else None)
    assert len(written["runs"]) == len(result.runs)


def test_the_table_and_the_figure(swept):
    cfg, result = swept
    out = Path(cfg.sweep.out_dir)
    write_report(result, out)
    table = (out / "sweep.md").read_text()
    assert "| global batch | per learner | updates per epoch | lr | ssgd | adpsgd | adpsgd_random_ring_delay_by_one | hadpsgd |" in table
    assert "| 4 | 1 | 10 | 0.05 |" in table and "| 8 | 2 | 5 | 0.1 |" in table
    assert "Largest converging global batch: ssgd" in table and "(the paper: 3)" in table
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_second_sweep_trains_nothing_again(swept, caplog):
    cfg, result = swept
    with caplog.at_level("INFO"):
        again = run_sweep(cfg)
    assert json.loads(json.dumps(again.runs)) == json.loads(json.dumps(result.runs))
    assert "runs done already" in caplog.text and " after 2 epochs (" not in caplog.text


@pytest.mark.slow
def test_runs_in_processes_give_the_same_numbers(root, swept):
    """Two worker processes: each run is deterministic from its settings, whichever finishes first."""
    _, result = swept
    cfg = toy_config(root, SWEEP + ["sweep.jobs=2", "sweep.algorithms=[adpsgd]", "sweep.extra_seeds=[]", f"sweep.out_dir={root}/jobs"])
    runs = run_sweep(cfg).runs
    expected = {(r["algorithm"], r["global_batch"], r["seed"]): r["held_out_loss"] for r in result.runs}
    assert [(r["algorithm"], r["global_batch"]) for r in runs] == [("baseline", 4), ("adpsgd", 4), ("adpsgd", 8)]
    for r in runs:
        assert r["held_out_loss"] == expected[(r["algorithm"], r["global_batch"], r["seed"])]


@pytest.mark.parametrize("override,message", [
    ("sweep.global_batches=[6]", "6 is not a multiple of sweep.learners=4"),
    ("sweep.speeds=[1,2]", "sweep.speeds: 2 speeds for sweep.learners=4"),
    ("sweep.learners_per_node=3", "sweep.learners_per_node=3 does not divide sweep.learners=4"),
    ("sweep.seeds=[]", "sweep.seeds is empty"),
])
def test_settings_that_do_not_fit_together_are_named(root, override, message):
    with pytest.raises(InputError, match=message):
        run_sweep(toy_config(root, SWEEP + [override, f"sweep.out_dir={root}/bad"]))


@pytest.mark.parametrize("override,message", [
    ("sweep.algorithms=[adpsgd_ring]", "sweep.algorithms=.*'adpsgd_ring': choose ssgd, or adpsgd/hadpsgd"),
    ("sweep.algorithms=[ssgd_delay_by_one]", "'ssgd_delay_by_one': choose ssgd, or adpsgd/hadpsgd"),
    ("sweep.lr_scaling=cubic", "sweep.lr_scaling='cubic': choose one of none, linear, sqrt"),
    ("sweep.jitter=1.5", r"sweep.jitter=1.5: must be in \[0.0, 1.0\)"),
])
def test_bad_values_are_refused_by_the_schema(override, message):
    with pytest.raises(InputError, match=message):
        load_config([override])
