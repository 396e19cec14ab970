"""The sweep on the toy corpus (a quick configuration): the baseline's lr grid and its best lr
with every seed, both verdicts in JSON with every point, the mixing rates, a table and a plot,
a re-run that trains nothing again, the same numbers from processes; and the control, an SSGD
whose effective lr is 4x the configured one, coming out with a critical lr 4x lower."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from asr.config import load_config
from asr.sweep import run as sweep_run
from asr.sweep.report import write_report
from asr.sweep import sweep as sweep_module
from asr.sweep.sweep import run_sweep
from asr.utils.errors import InputError
from asr.utils.pool import spawn_pool
from asr.utils.stop import EXIT_PREEMPTED
from asr.utils.threads import torch_threads
from tests.fixtures.toy_corpus import make_toy_experiment, toy_config, toy_overrides

torch.set_num_threads(1)
ALGORITHMS = ["ssgd", "adpsgd", "adpsgd_exponential_delay_by_one", "hadpsgd_random_ring"]
SWEEP = [
    "sweep=ctc",  # the preset every other starts from (the default is the frames regime)
    "sweep.learners=4",
    "sweep.learners_per_node=2",
    "sweep.global_batches=[4,8]",
    "sweep.base_batch=4",
    "sweep.epochs=2",
    "sweep.baseline_lrs=[0.05,0.1]",
    "sweep.critical_batch=8",
    "sweep.critical_lrs=[0.1,0.2]",
    "sweep.num_layers=0",
    "sweep.hidden_size=0",
    "sweep.jobs=1",
    "sweep.seeds=[1]",
    "sweep.extra_seeds=[2,3]",
    f"sweep.algorithms=[{','.join(ALGORITHMS)}]",
]
# The control: at the baseline's batch SSGD is the baseline, which converges at its best lr and
# nowhere else on this grid (lower: too slow in 6 epochs; higher: diverges or worse).
CONTROL = [
    "sweep=ctc",  # the preset every other starts from (the default is the frames regime)
    "sweep.learners=4",
    "sweep.global_batches=[4]",
    "sweep.base_batch=4",
    "sweep.epochs=6",
    "sweep.baseline_lrs=[0.2,0.4,0.8,1.6]",
    "sweep.critical_batch=4",
    "sweep.critical_lrs=[0.05,0.1,0.2,0.4,0.8,1.6,3.2]",
    "sweep.num_layers=0",
    "sweep.hidden_size=0",
    "sweep.jobs=1",
    "sweep.seeds=[1]",
    "sweep.extra_seeds=[2,3]",
    "sweep.algorithms=[ssgd,ssgd_lr_x4]",
]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep_toy")
    make_toy_experiment(root)
    return root


@pytest.fixture(scope="module")
def swept(root):
    """The sweep run in this process on one thread, as the worker processes run it (train.threads
    over sweep.jobs): test_runs_in_processes_give_the_same_numbers compares them bit for bit,
    whatever count the pytest worker is on."""
    cfg = toy_config(root, SWEEP)
    with torch_threads(1):
        return cfg, run_sweep(cfg)


def test_the_baseline_grid_then_its_best_lr_with_every_seed(swept):
    _, result = swept
    baseline = sorted((r["lr"], r["seed"]) for r in result.runs if r["algorithm"] == "baseline")
    best = result.baseline.best.lr
    assert best in (0.05, 0.1) and baseline == sorted({(0.05, 1), (0.1, 1)} | {(best, 2), (best, 3)})
    assert result.baseline.best.seeds == [1, 2, 3] and len(result.baseline.last_improvements) == 3


def test_a_run_per_point_of_both_measurements(swept):
    cfg, result = swept
    best = result.baseline.best.lr
    runs = {(r["algorithm"], r["global_batch"], r["lr"], r["seed"]): r for r in result.runs}
    critical = {(a, 8, lr, 1) for a in ALGORITHMS for lr in (0.1, 0.2)}
    batches = {(a, g, best * (g / 4), 1) for a in ALGORITHMS for g in (4, 8)}  # scaled linearly from the best lr
    assert critical <= set(runs) and batches <= set(runs)
    for r in result.runs:
        steps_per_epoch = 40 // r["global_batch"]  # 40 training utterances, every batch full
        nodes = {"baseline": 1, "ssgd": 1, "hadpsgd_random_ring": 2}.get(r["algorithm"], 4)
        assert (
            r["steps_per_epoch"] == steps_per_epoch
            and [e["epoch"] for e in r["epochs_log"]] == [1, 2]
            and not r["diverged"]
        )
        for epoch in r["epochs_log"]:
            # every global batch's share is claimed by exactly one node, first come first served
            assert len(epoch["steps"]) == nodes and sum(epoch["steps"]) == steps_per_epoch * nodes
    # SSGD over 4 learners at the baseline's batch and lr trains exactly what the baseline trains.
    base = next(r for r in result.runs if r["algorithm"] == "baseline" and r["lr"] == best and r["seed"] == 1)
    ssgd = next(r for r in result.runs if r["algorithm"] == "ssgd" and r["global_batch"] == 4 and r["seed"] == 1)
    assert ssgd["held_out_loss"] == pytest.approx(base["held_out_loss"], rel=1e-5)


def test_the_json_holds_both_verdicts_every_point_and_the_mixing_rates(swept):
    cfg, result = swept
    written = json.loads((Path(cfg.sweep.out_dir) / "sweep.json").read_text())
    for key, measurement in (("critical_lr", result.critical), ("largest_converging_batch", result.batches)):
        assert written[key]["value"] == measurement.largest and set(measurement.largest) == set(ALGORITHMS)
        assert set(written[key]["ratio"]) == set(ALGORITHMS) - {"ssgd"}
        ssgd = measurement.largest["ssgd"]
        assert written[key]["ratio"]["adpsgd"] == (
            measurement.largest["adpsgd"] / ssgd if ssgd and measurement.largest["adpsgd"] else None
        )
        assert len(written[key]["points"]) == 2 * len(ALGORITHMS)
    baseline = written["baseline"]
    assert baseline["seeds"] == [1, 2, 3] and baseline["held_out_loss"] == pytest.approx(sum(baseline["losses"]) / 3)
    assert [p["lr"] for p in baseline["lr_grid"]] == [0.05, 0.1] and isinstance(baseline["settled"], bool)
    by_seed = dict(zip(baseline["seeds"], baseline["losses"]))
    for point in written["critical_lr"]["points"] + written["largest_converging_batch"]["points"]:
        excesses = [loss / by_seed[seed] - 1 for loss, seed in zip(point["losses"], point["seeds"])]
        assert point["excess"] == pytest.approx(sum(excesses) / len(excesses))
        assert point["converges"] == (point["excess"] <= 0.05)
        assert len(point["seeds"]) == 1 or len(point["seeds"]) == 3  # close to the line: 3 seeds
    # 4 ADPSGD nodes on a ring: cos^2(pi/4); on the hypercube 1 - 1/2; 2 nodes always average together.
    assert {a: m["consensus_rate"] for a, m in written["mixing"].items()} == pytest.approx(
        {"ssgd": 0.0, "adpsgd": 0.5, "adpsgd_exponential_delay_by_one": 0.5, "hadpsgd_random_ring": 0.0}
    )
    assert "same data seen" in written["budget"] and len(written["runs"]) == len(result.runs)


def test_the_baseline_measures_the_noise_scale_and_every_run_scores_a_training_slice(swept):
    cfg, result = swept
    written = json.loads((Path(cfg.sweep.out_dir) / "sweep.json").read_text())
    noise = written["noise_scale"]
    # the base batch and the sweep's largest batch; 40 utterances hold 5 batches of 8
    assert (noise["small_batch"], noise["big_batch"], noise["rounds"]) == (4, 8, 5)
    assert set(noise["per_seed"]) == {"1", "2", "3"} and len(noise["per_epoch"]) == 2
    assert noise["largest_converging_batch"] == result.batches.largest
    for r in result.runs:
        for epoch in r["epochs_log"]:
            assert epoch["train_slice_loss"] > 0
            assert ("noise_scale" in epoch) == (r["algorithm"] == "baseline")
    points = written["critical_lr"]["points"] + written["largest_converging_batch"]["points"]
    for point in points:
        expected = {None} if point["converges"] else {"optimisation", "generalisation", "diverged"}
        assert point["failure"] in expected and len(point["train_slice_losses"]) == len(point["seeds"])
    assert set(written["critical_lr"]["ratio_range"]) == set(ALGORITHMS) - {"ssgd"}
    # 40 utterances, 2 epochs: at batch 8 each is seen twice, in 10 updates
    regime = written["setup"]["regime"]
    assert (regime["train_items"], regime["visits_per_item_at_largest_batch"], regime["updates_at_largest_batch"]) == (
        40,
        2,
        10,
    )
    assert regime["lr_schedule"] == "linear warm-up over 0.5 epoch, then x0.5 per epoch"


def test_a_noise_batch_larger_than_the_training_set_is_named_before_training(root):
    cfg = toy_config(root, [*SWEEP, "sweep.noise_batches=[4,80]", f"sweep.out_dir={root / 'noise'}"])
    with pytest.raises(InputError, match=r"sweep.noise_batches: a big batch of 80 needs .* there are 40"):
        run_sweep(cfg)
    assert not (root / "noise" / "sweep.json").exists()  # no run was trained


def test_the_table_and_the_figure(swept):
    cfg, result = swept
    out = Path(cfg.sweep.out_dir)
    write_report(result, out)
    table = (out / "sweep.md").read_text()
    assert "| lr | ssgd | adpsgd | adpsgd_exponential_delay_by_one | hadpsgd_random_ring |" in table
    assert "| global batch | per learner | lr | ssgd |" in table and "| adpsgd | ring | 4 | 0.5000 |" in table
    assert "**critical_lr** (the largest lr that converges): ssgd" in table and "Over SSGD's: adpsgd" in table
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_second_sweep_trains_nothing_again(swept, caplog):
    cfg, result = swept
    with caplog.at_level("INFO"):
        again = run_sweep(cfg)
    assert json.loads(json.dumps(again.runs)) == json.loads(json.dumps(result.runs))
    assert "runs done already" in caplog.text and " after 2 epochs (" not in caplog.text


def test_a_points_extra_seeds_count_after_the_margin_is_narrowed(root, swept, caplog):
    """Extra seeds trained under a wide sweep.close_margin stay in the verdict of a sweep
    resumed with a margin under which no point is close: it trains nothing and drops no seed."""
    cfg, _ = swept
    out = root / "margins"
    out.mkdir()
    (out / "sweep.json").write_text((Path(cfg.sweep.out_dir) / "sweep.json").read_text())
    narrow = SWEEP[:-1] + ["sweep.algorithms=[ssgd]", f"sweep.out_dir={out}"]
    wide = run_sweep(toy_config(root, narrow + ["sweep.close_margin=10"]))
    seeds = {(p.global_batch, p.lr): p.seeds for s in wide.critical.points.values() for p in s}
    assert seeds and all(s == [1, 2, 3] for s in seeds.values())
    caplog.clear()  # the resumed run's lines only
    with caplog.at_level("INFO"):
        again = run_sweep(toy_config(root, narrow + ["sweep.close_margin=0"]))
    assert {(p.global_batch, p.lr): p.seeds for s in again.critical.points.values() for p in s} == seeds
    assert again.critical.largest == wide.critical.largest and " after 2 epochs (" not in caplog.text


def test_the_control_with_4x_the_effective_lr_has_a_4x_lower_critical_lr(root):
    """If the sweep could not see a difference in lr (or took the end of an unbroken run from
    the smallest lr, where SSGD does not converge), this would not come out 4."""
    cfg = toy_config(root, CONTROL + [f"sweep.out_dir={root}/control"])
    result = run_sweep(cfg)
    ssgd, control = result.critical.largest["ssgd"], result.critical.largest["ssgd_lr_x4"]
    assert ssgd == result.baseline.best.lr and 0.05 < ssgd < 3.2  # inside the grid, not at its edge
    assert control == pytest.approx(ssgd / 4) and result.critical.ratio["ssgd_lr_x4"] == pytest.approx(0.25)


@pytest.mark.slow
def test_runs_in_processes_give_the_same_numbers(root, swept, monkeypatch):
    """Two worker processes: each run is deterministic from its settings, whichever finishes first.
    One pool serves every phase: its workers import torch and load the data once."""
    _, result = swept
    cfg = toy_config(
        root,
        SWEEP + ["sweep.jobs=2", "sweep.algorithms=[adpsgd]", "sweep.critical_lrs=[0.1]", f"sweep.out_dir={root}/jobs"],
    )
    pools = []

    def counted_pool(workers, **kwargs):
        pools.append(workers)
        return spawn_pool(workers, **kwargs)

    monkeypatch.setattr(sweep_module, "spawn_pool", counted_pool)
    runs = run_sweep(cfg).runs
    assert pools == [2]
    expected = {(r["algorithm"], r["global_batch"], r["lr"], r["seed"]): r["held_out_loss"] for r in result.runs}
    assert {r["algorithm"] for r in runs} == {"baseline", "adpsgd"}
    for r in runs:
        assert r["held_out_loss"] == expected[(r["algorithm"], r["global_batch"], r["lr"], r["seed"])]


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["sweep.global_batches=[6]"], "6 is not a multiple of sweep.learners=4"),
        (["sweep.critical_batch=6"], "sweep.critical_batch: 6 is not a multiple of sweep.learners=4"),
        (["sweep.speeds=[1,2]"], "sweep.speeds: 2 speeds for sweep.learners=4"),
        (["sweep.learners_per_node=3"], "sweep.learners_per_node=3 does not divide sweep.learners=4"),
        (["sweep.seeds=[]"], "sweep.seeds is empty"),
        (["sweep.extra_seeds=[2]"], "sweep.extra_seeds: a point near the threshold needs at least 3 seeds"),
        (
            ["sweep.learners=6", "sweep.learners_per_node=3", "sweep.global_batches=[6]", "sweep.critical_batch=6"],
            "adpsgd_exponential_delay_by_one on 6 nodes: "
            "distributed.topology=exponential needs a power-of-two number of nodes",
        ),
    ],
)
def test_settings_that_do_not_fit_together_are_named(root, overrides, message):
    with pytest.raises(InputError, match=message):
        run_sweep(toy_config(root, SWEEP + overrides + [f"sweep.out_dir={root}/bad"]))


def test_sweep_train_overrides_train_but_not_the_sweeps_own_settings(root):
    with pytest.raises(InputError, match="sweep.train.lr: the sweep sets it for every run"):
        run_sweep(toy_config(root, SWEEP + ["+sweep.train.lr=0.1", f"sweep.out_dir={root}/bad"]))
    with pytest.raises(InputError, match="sweep.train: Key 'epochz' not in 'TrainConfig'"):
        run_sweep(toy_config(root, SWEEP + ["+sweep.train.epochz=1", f"sweep.out_dir={root}/bad"]))


@pytest.mark.parametrize(
    "override,message",
    [
        ("sweep.algorithms=[adpsgd_ring]", "sweep.algorithms=.*'adpsgd_ring': choose ssgd, or adpsgd/hadpsgd"),
        ("sweep.algorithms=[ssgd_delay_by_one]", "'ssgd_delay_by_one': choose ssgd, or adpsgd/hadpsgd"),
        ("sweep.lr_scaling=cubic", "sweep.lr_scaling='cubic': choose one of none, linear, sqrt"),
        ("sweep.jitter=1.5", r"sweep.jitter=1.5: must be in \[0.0, 1.0\)"),
        ("sweep.critical_lrs=[0.1,0.3,0.5]", "sweep.critical_lrs=.*give a geometric grid"),
        ("sweep.global_batches=[64,16]", "sweep.global_batches=.*list the values once each, ascending"),
    ],
)
def test_bad_values_are_refused_by_the_schema(override, message):
    with pytest.raises(InputError, match=message):
        load_config(["sweep=ctc", override])


def test_a_training_subset_that_cuts_a_partial_batch_is_warned_about(caplog):
    """One learner keeps a partial last batch, many merge it: the runs' epochs would differ."""
    from asr.sweep.sweep import check

    with caplog.at_level("WARNING"):
        check(load_config(["sweep=ctc", "sweep.max_train_utts=3072"]))
        assert "not a multiple" not in caplog.text
        check(load_config(["sweep=ctc", "sweep.max_train_utts=3000"]))
    assert "sweep.max_train_utts=3000 is not a multiple of the global batches [16, 32, 64, 128, 256]" in caplog.text


def test_batched_nodes_on_whole_utterances_step_each_node_alone_and_say_why(root, caplog):
    from asr.models.blstm import build_model
    from asr.sweep.run import SweepData, with_train_config

    cfg = with_train_config(toy_config(root, [*SWEEP, "sweep.batched_nodes=true"]))
    data = SweepData(cfg)
    model = build_model(cfg.model, data.train.feat_dim, data.objective.num_outputs)
    with caplog.at_level("INFO"):
        assert data.gradients_fn(model) is None
    assert "each node's steps alone: whole utterances differ in length" in caplog.text


def test_a_process_that_trains_sweep_runs_flushes_subnormals_first(sweep_start_in_this_process):
    """A run at a large lr saturates the LSTM's gates: their subnormal values would make it many
    times slower (asr.utils.device.flush_denormals)."""
    threads = torch.get_num_threads()
    sweep_run.start_process(threads)
    assert (torch.tensor([1e-39]) * 1.0).item() == 0.0  # below fp32's smallest normal number
    assert torch.get_num_threads() == threads


@pytest.mark.slow
def test_a_signalled_sweep_ends_its_runs_in_processes_at_once(root, tmp_path):
    """SIGTERM while two worker processes train: the stage exits 75 within seconds. A process
    pool's own exit would first train every run submitted (here 10,000 epochs each), then keep none."""
    out = tmp_path / "stopped"
    overrides = toy_overrides(root, [*SWEEP, "sweep.jobs=2", "sweep.epochs=10000", f"sweep.out_dir={out}"])
    with open(tmp_path / "stderr", "w+") as err:
        stage = subprocess.Popen(
            [sys.executable, "-m", "asr.sweep", *overrides],
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,  # its workers too can be ended, should it hang
        )
        try:
            deadline = time.monotonic() + 120
            while "sweep: ssgd" not in (tmp_path / "stderr").read_text() and stage.poll() is None:
                assert time.monotonic() < deadline, "the sweep never started its runs"
                time.sleep(0.1)
            time.sleep(2)  # the workers start, then train
            stage.send_signal(signal.SIGTERM)
            stage.wait(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(stage.pid, signal.SIGKILL)
    log = (tmp_path / "stderr").read_text()
    assert stage.returncode == EXIT_PREEMPTED, log[-3000:]
    assert "stage sweep stopped by SIGTERM" in log and "Traceback" not in log
