"""The verdicts on hand-made curves: the baseline's best lr and whether it settled, each seed
against its own baseline, the largest converging batch and critical lr over every point (a
failure in between hides nothing above it), the ratios, divergence, the points close to the line."""

import pytest

from asr.sweep.verdict import calibrate, close_points, converges, judge
from asr.utils.errors import InputError


def run(algorithm, batch, seed, loss, lr=0.1, curve=None, train=None):
    """`train`: the last epoch's loss on the slice of training samples."""
    curve = curve or [loss]
    epochs = [{"held_out_loss": value} for value in curve]
    if train is not None:
        epochs[-1]["train_slice_loss"] = train
    return {
        "algorithm": algorithm,
        "global_batch": batch,
        "seed": seed,
        "held_out_loss": loss,
        "lr": lr,
        "epochs_log": epochs,
    }


# One learner at batch 16: lr 0.1 is best (1.0 with seed 1); seed 2 of it 1.2.
BASELINE = [
    run("baseline", 16, 1, 1.4, lr=0.05),
    run("baseline", 16, 1, 1.0, lr=0.1, curve=[1.5, 1.02, 1.0]),
    run("baseline", 16, 2, 1.2, lr=0.1, curve=[1.6, 1.3, 1.2]),
    run("baseline", 16, 1, None, lr=0.2),
]


def batches(algorithm, points):
    """lr scaled linearly from the best baseline lr (0.1 at 16)."""
    return [run(algorithm, batch, 1, loss, lr=0.1 * batch / 16) for batch, loss in points]


def batch_verdict(results, algorithms, grid=(16, 32, 64, 128, 256)):
    baseline = calibrate(results, 0.05)
    wanted = {a: [(b, 0.1 * b / 16) for b in grid] for a in algorithms}
    return judge(results, baseline, "largest_converging_batch", "global_batch", wanted)


def test_the_baseline_takes_the_best_lr_of_its_grid_and_says_whether_it_settled():
    baseline = calibrate(BASELINE, tolerance=0.05)
    assert [p.lr for p in baseline.grid] == [0.05, 0.1, 0.2] and baseline.grid[2].diverged
    assert baseline.best.lr == 0.1 and baseline.best.seeds == [1, 2] and baseline.best.mean == pytest.approx(1.1)
    assert baseline.last_improvements == pytest.approx([0.02, 0.1 / 1.2])
    assert not baseline.settled  # seed 2's last epoch still took 8.3% off, more than half the 5% tolerance
    settled = calibrate([run("baseline", 16, 1, 1.0, curve=[1.2, 1.01, 1.0])], tolerance=0.05)
    assert settled.settled and settled.threshold == pytest.approx(1.05)


def test_the_best_lr_is_chosen_on_the_seeds_every_lr_has():
    """lr 0.2's seed 1 (0.95) beats lr 0.1's (1.0), though lr 0.1's mean over two seeds is lower."""
    results = [
        run("baseline", 16, 1, 1.0, lr=0.1),
        run("baseline", 16, 2, 0.8, lr=0.1),
        run("baseline", 16, 1, 0.95, lr=0.2),
    ]
    assert calibrate(results, 0.05).best.lr == 0.2


def test_each_seed_is_compared_with_its_own_baseline():
    """1.25 is 4.2% above seed 2's baseline (1.2), but 25% above seed 1's."""
    results = BASELINE + [run("ssgd", 16, 2, 1.25), run("adpsgd", 16, 1, 1.25)]
    verdict = batch_verdict(results, ["ssgd", "adpsgd"], grid=[16])
    ssgd, adpsgd = verdict.points["ssgd"][0], verdict.points["adpsgd"][0]
    assert ssgd.excess == pytest.approx(1.25 / 1.2 - 1) and converges(ssgd, 0.05)
    assert adpsgd.excess == pytest.approx(0.25) and not converges(adpsgd, 0.05)


def test_the_largest_converging_batch_is_the_largest_that_converges_not_the_end_of_a_run():
    """ADPSGD converges at 64 and 256 but not at 128 (nor 16, 32): 256. SSGD at 16 and 64: 64."""
    results = (
        BASELINE
        + batches("ssgd", [(16, 1.01), (32, 1.2), (64, 1.04), (128, 1.3), (256, None)])
        + batches("adpsgd", [(16, 1.2), (32, 1.3), (64, 1.03), (128, 1.09), (256, 1.049)])
        + batches("hadpsgd", [(16, 1.3), (32, None)])
    )
    verdict = batch_verdict(results, ["ssgd", "adpsgd", "hadpsgd"])
    assert verdict.largest == {"ssgd": 64, "adpsgd": 256, "hadpsgd": None}
    assert verdict.ratio == {"adpsgd": 4, "hadpsgd": None}
    # SSGD's limit lies in [64, 128), ADPSGD's at or beyond the grid's end: at least 2x
    assert verdict.first_failing == {"ssgd": 128, "adpsgd": None, "hadpsgd": None}
    assert verdict.ratio_range == {"adpsgd": [2, None], "hadpsgd": None}
    assert [p.global_batch for p in verdict.points["hadpsgd"]] == [16, 32]  # only the points that ran


def test_a_critical_lr_two_points_lower_on_a_doubling_grid_is_a_ratio_of_four():
    grid = [0.025, 0.05, 0.1, 0.2, 0.4, 0.8]
    ssgd = [1.3, 1.02, 1.01, None, None, None]  # converges up to 0.1 (not at 0.025: too slow)
    adpsgd = [1.4, 1.2, 1.03, 1.04, 1.02, 1.5]  # up to 0.4
    results = (
        BASELINE
        + [run("ssgd", 64, 1, loss, lr=lr) for lr, loss in zip(grid, ssgd)]
        + [run("adpsgd", 64, 1, loss, lr=lr) for lr, loss in zip(grid, adpsgd)]
    )
    verdict = judge(
        results,
        calibrate(results, 0.05),
        "critical_lr",
        "lr",
        {a: [(64, lr) for lr in grid] for a in ("ssgd", "adpsgd")},
    )
    assert verdict.largest == {"ssgd": 0.1, "adpsgd": 0.4}
    assert verdict.ratio["adpsgd"] == pytest.approx(4)
    # the limits lie in [0.1, 0.2) and [0.4, 0.8): the ratio in (2, 8)
    assert verdict.ratio_range["adpsgd"] == pytest.approx([2, 8])


def test_a_diverged_seed_fails_the_point_and_no_ssgd_value_leaves_the_ratios_undefined():
    results = BASELINE + [run("ssgd", 16, 1, None), run("adpsgd", 16, 1, 1.0), run("adpsgd", 16, 2, None)]
    verdict = batch_verdict(results, ["ssgd", "adpsgd"], grid=[16])
    assert verdict.points["adpsgd"][0].diverged and verdict.points["adpsgd"][0].excess is None
    assert verdict.largest == {"ssgd": None, "adpsgd": None} and verdict.ratio == {"adpsgd": None}


def test_close_points_lie_within_the_margin_of_the_tolerance():
    results = BASELINE + batches("ssgd", [(16, 1.03), (32, 1.079), (64, 1.081), (128, None)])
    close = close_points(batch_verdict(results, ["ssgd"]), 0.05, margin=0.03)
    assert [p.global_batch for p in close] == [16, 32]


def test_a_baseline_diverged_everywhere_is_named():
    with pytest.raises(
        InputError, match="sweep.baseline_lrs: the single-learner baseline diverged at every lr; lower them"
    ):
        calibrate([run("baseline", 16, 1, None, lr=0.1), run("baseline", 16, 1, None, lr=0.2)], tolerance=0.05)


def test_a_failing_point_is_told_overfit_from_unoptimised_by_its_training_loss():
    """Baseline seed 1: held out 1.0, training slice 0.5. Both points fail held out (1.2); the
    first trained its training samples as far as the baseline (0.51), the second did not (0.8)."""
    results = [
        run("baseline", 16, 1, 1.0, train=0.5),
        run("ssgd", 32, 1, 1.2, lr=0.2, train=0.51),
        run("ssgd", 64, 1, 1.2, lr=0.4, train=0.8),
        run("ssgd", 128, 1, None, lr=0.8),
        run("adpsgd", 32, 1, 1.01, lr=0.2, train=0.9),
        run("adpsgd", 64, 1, 1.2, lr=0.4),  # recorded before the slice was scored
    ]
    verdict = batch_verdict(results, ["ssgd", "adpsgd"], grid=(32, 64, 128))
    failures = {a: [p.failure(0.05) for p in points] for a, points in verdict.points.items()}
    assert failures == {"ssgd": ["generalisation", "optimisation", "diverged"], "adpsgd": [None, None]}
    assert verdict.points["ssgd"][0].train_excesses == pytest.approx([0.02])
