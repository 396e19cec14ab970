"""The convergence verdict on made-up results: each seed against its own baseline, the largest
batch up to which every point converges, the ratio, divergence, the points close to the line."""

import pytest

from asr.sweep.verdict import close_points, judge


def run(algorithm, batch, seed, loss):
    return {"algorithm": algorithm, "global_batch": batch, "seed": seed, "held_out_loss": loss}


BASELINE = [run("baseline", 16, 1, 1.0), run("baseline", 16, 2, 1.2)]


def test_each_seed_is_compared_with_its_own_baseline():
    """1.25 is 4.2% above seed 2's baseline (1.2), but 25% above seed 1's."""
    verdict = judge(BASELINE + [run("ssgd", 16, 2, 1.25), run("adpsgd", 16, 1, 1.25)], tolerance=0.05)
    ssgd, adpsgd = verdict.points["ssgd"][0], verdict.points["adpsgd"][0]
    assert ssgd.excess == pytest.approx(1.25 / 1.2 - 1) and verdict.converges(ssgd)
    assert adpsgd.excess == pytest.approx(0.25) and not verdict.converges(adpsgd)
    assert verdict.baseline.mean == pytest.approx(1.1) and verdict.threshold == pytest.approx(1.155)


def test_largest_converging_batch_is_where_the_first_failure_stops_the_series():
    results = BASELINE + [
        run("ssgd", 16, 1, 1.01), run("ssgd", 32, 1, 1.04), run("ssgd", 64, 1, 1.2), run("ssgd", 128, 1, 1.03),  # 128 alone does not count
        run("adpsgd", 16, 1, 1.0), run("adpsgd", 32, 1, 1.02), run("adpsgd", 64, 1, 1.03), run("adpsgd", 128, 1, 1.049),
        run("hadpsgd", 16, 1, 1.3),
    ]
    verdict = judge(results, tolerance=0.05, order=["ssgd", "adpsgd", "hadpsgd"])
    assert verdict.largest_converging_batch == {"ssgd": 32, "adpsgd": 128, "hadpsgd": None}
    assert list(verdict.points) == ["ssgd", "adpsgd", "hadpsgd"]
    assert verdict.ratio == 4


def test_a_diverged_seed_fails_the_point_and_no_ssgd_batch_leaves_the_ratio_undefined():
    results = BASELINE + [run("ssgd", 16, 1, None), run("adpsgd", 16, 1, 1.0), run("adpsgd", 16, 2, None)]
    verdict = judge(results, tolerance=0.05)
    assert verdict.points["adpsgd"][0].diverged and verdict.points["adpsgd"][0].excess is None
    assert verdict.largest_converging_batch == {"ssgd": None, "adpsgd": None} and verdict.ratio is None


def test_close_points_lie_within_the_margin_of_the_tolerance():
    results = BASELINE + [run("ssgd", 16, 1, 1.03), run("ssgd", 32, 1, 1.079), run("ssgd", 64, 1, 1.081), run("ssgd", 128, 1, None)]
    close = close_points(judge(results, tolerance=0.05), margin=0.03)
    assert [p.global_batch for p in close] == [16, 32]


def test_a_diverged_baseline_is_named():
    with pytest.raises(ValueError, match="baseline diverged: lower sweep.lr"):
        judge([run("baseline", 16, 1, None), run("ssgd", 16, 1, 1.0)], tolerance=0.05)
