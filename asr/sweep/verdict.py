"""Which runs converge: the baseline, the tolerance, the largest converging batch per algorithm.

The baseline is the single learner at sweep.base_batch, trained with every seed. Runs of one
seed share their initial weights and data order with the baseline of that seed, so each run is
compared with it: its *excess* is held-out loss / the same seed's baseline held-out loss - 1,
and a point (algorithm, global batch) converges when the mean excess over its seeds is at most
sweep.tolerance (a diverged seed makes the point fail). Pairing by seed takes out what the seed
does to every run alike (how soon the model leaves CTC's initial plateau moves the held-out loss
after a few epochs by several percent). An algorithm's largest converging batch is the largest
global batch up to which every point of the sweep converges (None: not even the smallest);
`ratio` is ADPSGD's over SSGD's, the paper's 3x. Points whose excess lies within
sweep.close_margin of the tolerance are `close`: noise could put them on either side, so they
get the extra seeds.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from asr.sweep.run import BASELINE


@dataclass
class Point:
    algorithm: str
    global_batch: int
    losses: list[float | None] = field(default_factory=list)  # per seed; None: diverged
    seeds: list[int] = field(default_factory=list)
    excesses: list[float | None] = field(default_factory=list)  # per seed: loss / the seed's baseline - 1

    @property
    def diverged(self) -> bool:
        return any(loss is None for loss in self.losses)

    @property
    def mean(self) -> float | None:
        return None if self.diverged or not self.losses else statistics.fmean(self.losses)

    @property
    def excess(self) -> float | None:
        return None if self.diverged or not self.excesses else statistics.fmean(self.excesses)

    @property
    def spread(self) -> float:
        """Largest minus smallest held-out loss over the seeds (0 with one seed)."""
        finite = [loss for loss in self.losses if loss is not None]
        return max(finite) - min(finite) if len(finite) > 1 else 0.0


@dataclass
class Verdict:
    baseline: Point
    tolerance: float
    points: dict[str, list[Point]]  # algorithm -> points by ascending global batch
    largest_converging_batch: dict[str, int | None]
    ratio: float | None

    def converges(self, point: Point) -> bool:
        return point.excess is not None and point.excess <= self.tolerance

    @property
    def threshold(self) -> float:
        """The baseline's mean held-out loss x (1 + tolerance): where the figure draws the line."""
        return self.baseline.mean * (1 + self.tolerance)


def collect(results: list[dict]) -> tuple[Point, dict[str, list[Point]]]:
    points: dict[tuple[str, int], Point] = {}
    for r in sorted(results, key=lambda r: r["seed"]):
        point = points.setdefault((r["algorithm"], r["global_batch"]), Point(r["algorithm"], r["global_batch"]))
        point.losses.append(r["held_out_loss"])
        point.seeds.append(r["seed"])
    baselines = [p for (algorithm, _), p in points.items() if algorithm == BASELINE]
    if len(baselines) != 1:
        raise ValueError(f"{len(baselines)} baselines among the results; expected one")
    baseline = baselines[0]
    if baseline.diverged:
        raise ValueError("the single-learner baseline diverged: lower sweep.lr")
    by_seed = dict(zip(baseline.seeds, baseline.losses))
    by_algorithm: dict[str, list[Point]] = defaultdict(list)
    for (algorithm, _), point in sorted(points.items(), key=lambda item: item[0][1]):
        if algorithm == BASELINE:
            continue
        point.excesses = [None if loss is None else loss / by_seed[seed] - 1 for loss, seed in zip(point.losses, point.seeds)]
        by_algorithm[algorithm].append(point)
    return baseline, dict(by_algorithm)


def judge(results: list[dict], tolerance: float, order: list[str] | None = None) -> Verdict:
    """`order`: the algorithms' order in the verdict's dicts (default: as found in the results)."""
    baseline, points = collect(results)
    points = {a: points[a] for a in sorted(points, key=lambda a: order.index(a) if order and a in order else len(order or []))}
    verdict = Verdict(baseline, tolerance, points, {}, None)
    for algorithm, series in points.items():
        largest = None
        for point in series:
            if not verdict.converges(point):
                break
            largest = point.global_batch
        verdict.largest_converging_batch[algorithm] = largest
    ssgd, adpsgd = verdict.largest_converging_batch.get("ssgd"), verdict.largest_converging_batch.get("adpsgd")
    verdict.ratio = adpsgd / ssgd if ssgd and adpsgd else None
    return verdict


def close_points(verdict: Verdict, margin: float) -> list[Point]:
    """Points whose excess lies within `margin` of the tolerance (diverged ones never)."""
    return [p for series in verdict.points.values() for p in series if p.excess is not None and abs(p.excess - verdict.tolerance) <= margin]
