"""Which runs converge, and the two verdicts: the critical lr and the largest converging batch.

The baseline is one learner at sweep.base_batch, calibrated first: every lr of
sweep.baseline_lrs with the first seed, and the lr with the lowest held-out loss again with
every seed (`calibrate`). Runs of one seed share their initial weights and data order with the
baseline of that seed, so each run is compared with it: its *excess* is held-out loss / the same
seed's baseline loss at the best lr - 1, and a point converges when no seed diverged and the
mean excess over its seeds is at most sweep.tolerance. Pairing by seed takes out what the seed
does to every run alike.

Two measurements, each over every point it has (no point hides another):

    critical_lr               at one global batch, lr on a grid without scaling: the largest lr
                              at which an algorithm converges
    largest_converging_batch  lr scaled linearly from the best baseline lr: the largest global
                              batch at which it converges

`ratio`: an algorithm's value over SSGD's (the paper: ADPSGD about 3x SSGD's batch). Points
whose excess lies within sweep.close_margin of the tolerance are `close`: noise could put them
on either side, so they get the extra seeds.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from asr.utils.errors import InputError

BASELINE = "baseline"  # one learner at sweep.base_batch
REFERENCE = "ssgd"  # ratios are over its value


@dataclass
class Point:
    algorithm: str
    global_batch: int
    lr: float
    losses: list[float | None] = field(default_factory=list)  # per seed; None: diverged
    seeds: list[int] = field(default_factory=list)
    excesses: list[float | None] = field(default_factory=list)  # per seed: loss / the seed's baseline - 1
    # per seed: the last epoch's loss on the slice of training samples (None: diverged, or a run
    # recorded before the slice was), and its excess over the seed's baseline's
    train_losses: list[float | None] = field(default_factory=list)
    train_excesses: list[float | None] = field(default_factory=list)

    @property
    def diverged(self) -> bool:
        return any(loss is None for loss in self.losses)

    @property
    def mean(self) -> float | None:
        return None if self.diverged or not self.losses else statistics.fmean(self.losses)

    @property
    def excess(self) -> float | None:
        return None if self.diverged or not self.excesses else statistics.fmean(self.excesses)

    def failure(self, tolerance: float) -> str | None:
        """Why a point does not converge: `diverged`; `generalisation` where it trained the
        training samples' loss to within the tolerance of the baseline's (it overfit);
        `optimisation` where it did not; None where it converges or the slice was not scored."""
        if self.diverged:
            return "diverged"
        if self.excess is None or self.excess <= tolerance:
            return None
        if not self.train_excesses or None in self.train_excesses:
            return None
        return "generalisation" if statistics.fmean(self.train_excesses) <= tolerance else "optimisation"

    @property
    def spread(self) -> float:
        """Largest minus smallest held-out loss over the seeds (0 with one seed)."""
        finite = [loss for loss in self.losses if loss is not None]
        return max(finite) - min(finite) if len(finite) > 1 else 0.0


@dataclass
class Baseline:
    grid: list[Point]  # one learner at base_batch, one point per lr, ascending
    best: Point  # the lr with the lowest held-out loss, with every seed
    last_improvements: list[float | None]  # per seed of `best`: how much its last epoch lowered the loss (relative)
    tolerance: float

    @property
    def settled(self) -> bool:
        """Every seed's last epoch improved it by less than half the tolerance: more epochs
        would not move the threshold by much."""
        return all(i is not None and i < self.tolerance / 2 for i in self.last_improvements)

    @property
    def threshold(self) -> float:
        return self.best.mean * (1 + self.tolerance)


@dataclass
class Measurement:
    name: str  # critical_lr | largest_converging_batch
    axis: str  # lr | global_batch: what varies along a series
    points: dict[str, list[Point]]  # algorithm -> its points, ascending along the axis
    largest: dict[str, float | None]  # the largest converging value (None: converges nowhere)
    ratio: dict[str, float | None]  # over SSGD's, for every other algorithm
    # the grid's resolution: the first value above `largest` where the algorithm fails (None: it
    # converged at the grid's last point, so its limit lies beyond the grid)
    first_failing: dict[str, float | None] = field(default_factory=dict)
    # [low, high] the ratio can take given both algorithms' limits lie between their largest
    # converging and first failing values (high None: unbounded by the grid)
    ratio_range: dict[str, list[float | None] | None] = field(default_factory=dict)


def converges(point: Point, tolerance: float) -> bool:
    return point.excess is not None and point.excess <= tolerance


def collect(results: list[dict]) -> dict[tuple[str, int, float], Point]:
    points: dict[tuple[str, int, float], Point] = {}
    for r in sorted(results, key=lambda r: r["seed"]):
        key = (r["algorithm"], r["global_batch"], r["lr"])
        point = points.setdefault(key, Point(*key))
        point.losses.append(r["held_out_loss"])
        point.seeds.append(r["seed"])
        last = r["epochs_log"][-1] if r["held_out_loss"] is not None and r["epochs_log"] else {}
        point.train_losses.append(last.get("train_slice_loss"))
    return points


def last_improvement(run: dict) -> float | None:
    losses = [e["held_out_loss"] for e in run["epochs_log"]]
    if len(losses) < 2 or None in losses[-2:]:
        return None
    return (losses[-2] - losses[-1]) / losses[-1]


def calibrate(results: list[dict], tolerance: float) -> Baseline:
    """The baseline's lr grid and its best lr: the lowest mean held-out loss over the seeds
    every lr of the grid has (the first seed), so that no lr wins by having other seeds."""
    runs = [r for r in results if r["algorithm"] == BASELINE]
    grid = sorted((p for p in collect(runs).values()), key=lambda p: p.lr)
    if not grid:
        raise ValueError("no baseline among the results")
    common = set.intersection(*(set(p.seeds) for p in grid))

    def loss(p: Point) -> float:
        values = [loss for loss, seed in zip(p.losses, p.seeds) if seed in common]
        return math.inf if None in values else statistics.fmean(values)

    best = min(grid, key=loss)
    if not math.isfinite(loss(best)):
        raise InputError("sweep.baseline_lrs: the single-learner baseline diverged at every lr; lower them")
    improvements = [last_improvement(r) for r in sorted(runs, key=lambda r: r["seed"]) if r["lr"] == best.lr]
    return Baseline(grid, best, improvements, tolerance)


def judge(
    results: list[dict], baseline: Baseline, name: str, axis: str, wanted: dict[str, list[tuple[int, float]]]
) -> Measurement:
    """`wanted`: per algorithm, the (global batch, lr) of its points in the order of the axis;
    points without runs are left out."""
    points = collect([r for r in results if r["algorithm"] != BASELINE])
    by_seed = dict(zip(baseline.best.seeds, baseline.best.losses))
    train_by_seed = dict(zip(baseline.best.seeds, baseline.best.train_losses))
    series: dict[str, list[Point]] = defaultdict(list)
    for algorithm, coordinates in wanted.items():
        for batch, lr in coordinates:
            point = next(
                (
                    p
                    for (a, b, rate), p in points.items()
                    if a == algorithm and b == batch and math.isclose(rate, lr, rel_tol=1e-9)
                ),
                None,
            )
            if point is None:
                continue
            missing = [seed for seed in point.seeds if seed not in by_seed]
            if missing:
                raise ValueError(
                    f"{algorithm} at batch {batch}, lr {lr:g}: seeds {missing} have no baseline run at the best lr"
                )
            point.excesses = [
                None if loss is None else loss / by_seed[seed] - 1 for loss, seed in zip(point.losses, point.seeds)
            ]
            point.train_excesses = [
                None if loss is None or not train_by_seed[seed] else loss / train_by_seed[seed] - 1
                for loss, seed in zip(point.train_losses, point.seeds)
            ]
            series[algorithm].append(point)
    largest = {
        a: max((getattr(p, axis) for p in series.get(a, []) if converges(p, baseline.tolerance)), default=None)
        for a in wanted
    }
    reference = largest.get(REFERENCE)
    ratio = {
        a: (value / reference if value is not None and reference else None)
        for a, value in largest.items()
        if a != REFERENCE
    }
    first_failing = {
        a: next(
            (
                getattr(p, axis)
                for p in series.get(a, [])
                if largest[a] is not None and getattr(p, axis) > largest[a] and not converges(p, baseline.tolerance)
            ),
            None,
        )
        for a in wanted
    }
    ratio_range = {
        a: ratio_bounds(largest[a], first_failing[a], reference, first_failing.get(REFERENCE)) for a in ratio
    }
    return Measurement(name, axis, dict(series), largest, ratio, first_failing, ratio_range)


def ratio_bounds(value, value_fails, reference, reference_fails) -> list[float | None] | None:
    """The ratio's range when each limit lies in [largest converging, first failing)."""
    if value is None or not reference:
        return None
    low = value / reference_fails if reference_fails else None
    high = value_fails / reference if value_fails else None
    return [low, high]


def close_points(measurement: Measurement, tolerance: float, margin: float) -> list[Point]:
    """Points whose excess lies within `margin` of the tolerance (diverged ones never)."""
    return [
        p
        for series in measurement.points.values()
        for p in series
        if p.excess is not None and abs(p.excess - tolerance) <= margin
    ]
