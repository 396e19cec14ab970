"""The whole sweep: which runs, in which order, side by side, and where the results go.

    1. the baseline's calibration: one learner at sweep.base_batch, every lr of
       sweep.baseline_lrs with the first seed; the best lr again with every seed (verdict.py)
    2. every algorithm at sweep.critical_batch with every lr of sweep.critical_lrs, and at
       every batch of sweep.global_batches with the best lr scaled to it, with sweep.seeds
    3. the extra seeds for the points close to the convergence threshold

Runs are trained in sweep.jobs processes side by side; each is deterministic from its
settings, so the order they finish in changes nothing, and a run both measurements need (the
critical batch at its scaled lr) is trained once.

`<sweep.out_dir>/sweep.json` is rewritten after every run, so an interrupted sweep goes on
with the runs it has not done (a run is identified by its settings, run.RunSettings).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf
from tqdm import tqdm

from asr.distributed.topology import make_ring, mixing_rate
from asr.sweep.config import parse_algorithm
from asr.sweep.noise_scale import PAPER_SWITCHBOARD, check_batches
from asr.sweep.run import (
    NoiseSettings,
    RunSettings,
    SweepData,
    passes_per_epoch,
    result_settings,
    run_settings,
    scaled_lr,
    start_process,
    sweep_batches,
    train_config,
    train_run,
    with_train_config,
)
from asr.sweep.verdict import BASELINE, Baseline, Measurement, Point, calibrate, close_points, converges, judge
from asr.utils.atomic import write_text
from asr.utils.errors import InputError
from asr.utils.pool import spawn_pool

log = logging.getLogger(__name__)


BUDGET = {
    "epochs": "every run trains sweep.epochs epochs whatever its batch (the same data seen, so a larger batch takes "
    "fewer updates): the large-batch question is whether fewer, larger steps reach the same loss on the same data; "
    "equal updates would give a larger batch more data instead",
    "updates": "every run makes the baseline's updates: an epoch is batch / sweep.base_batch passes over the data "
    "(a larger batch sees more data), so a larger batch is not held back by fewer updates, as on a corpus far larger "
    "than its batches",
}


@dataclass
class SweepResult:
    runs: list[dict]
    baseline: Baseline
    critical: Measurement
    batches: Measurement
    mixing: dict[str, dict]
    setup: dict
    noise: dict


def nodes(scfg, algorithm: str) -> int:
    base = parse_algorithm(algorithm).base
    return {"ssgd": 1, "adpsgd": int(scfg.learners), "hadpsgd": int(scfg.learners) // int(scfg.learners_per_node)}[base]


def check(cfg) -> None:
    """Settings that are each valid but do not fit together."""
    scfg = cfg.sweep
    for key, batches in (("global_batches", scfg.global_batches), ("critical_batch", [scfg.critical_batch])):
        for batch in batches:
            if batch % scfg.learners:
                raise InputError(f"sweep.{key}: {batch} is not a multiple of sweep.learners={scfg.learners}")
    if any(a.startswith("hadpsgd") for a in scfg.algorithms) and scfg.learners % scfg.learners_per_node:
        raise InputError(
            f"sweep.learners_per_node={scfg.learners_per_node} does not divide sweep.learners={scfg.learners}"
        )
    if scfg.speeds and len(scfg.speeds) != scfg.learners:
        raise InputError(
            f"sweep.speeds: {len(scfg.speeds)} speeds for sweep.learners={scfg.learners}; "
            "give one per learner, or [] to draw them"
        )
    if not scfg.seeds:
        raise InputError("sweep.seeds is empty: give at least one seed")
    if len(set(scfg.seeds) | set(scfg.extra_seeds)) < 3:
        raise InputError(
            "sweep.extra_seeds: a point near the threshold needs at least 3 seeds with sweep.seeds; add seeds to it"
        )
    for batch in sweep_batches(scfg):
        passes_per_epoch(scfg, batch)  # with budget=updates, a multiple of the base batch
    if not scfg.algorithms:
        raise InputError("sweep.algorithms is empty: name at least one algorithm (ssgd, adpsgd, ...)")
    if not scfg.baseline_lrs or not scfg.critical_lrs or not scfg.global_batches:
        raise InputError("sweep.baseline_lrs, sweep.critical_lrs and sweep.global_batches each need at least one value")
    train = train_config(cfg)
    chunked = bool(train.chunk_frames)  # samples: SweepData keeps a multiple of every batch of them
    if chunked and train.objective != "frame_ce":
        raise InputError(
            f"the sweep trains on samples of train.chunk_frames={train.chunk_frames} frames (its preset's or the "
            f"experiment's), which need the frame objective, not {train.objective}: add experiment=hybrid_ce "
            "model.num_pdfs=N (after ./run.sh --stop-stage 2 experiment=hybrid_ce), or sweep=ctc for CTC on whole "
            "utterances"
        )
    ragged = [b for b in sweep_batches(scfg) if scfg.max_train_utts % b]
    if scfg.max_train_utts and ragged and not chunked:
        # A partial last batch is kept by one learner and merged by many, so the epoch's batches
        # (and their shuffled order) differ between runs: SSGD at base_batch is then not the baseline.
        log.warning(
            "sweep.max_train_utts=%d is not a multiple of the global batches %s: their runs see differently cut "
            "epochs; a multiple of every batch (e.g. %d) keeps them alike",
            scfg.max_train_utts,
            ragged,
            max(1, scfg.max_train_utts // max(ragged)) * math.lcm(*ragged),
        )
    if noise := NoiseSettings.of(scfg):
        check_batches(noise.small, noise.big)
    for algorithm in scfg.algorithms:
        try:
            make_ring(nodes(scfg, algorithm), parse_algorithm(algorithm).topology)
        except InputError as err:
            raise InputError(f"sweep.algorithms: {algorithm} on {nodes(scfg, algorithm)} nodes: {err}") from None


def mixing(scfg) -> dict[str, dict]:
    """Each algorithm's per-step consensus rate: the second-largest eigenvalue modulus of its
    expected mixing matrix (topology.py); SSGD's all-reduce averages exactly every step (0)."""
    out = {}
    for algorithm in scfg.algorithms:
        variant, n = parse_algorithm(algorithm), nodes(scfg, algorithm)
        topology = "all-reduce" if variant.base == "ssgd" else variant.topology
        rate = 0.0 if variant.base == "ssgd" else mixing_rate(make_ring(n, variant.topology, int(scfg.seeds[0])))
        out[algorithm] = {"topology": topology, "nodes": n, "consensus_rate": round(rate, 6)}
    return out


def plan(cfg, best_lr: float) -> tuple[dict, dict]:
    """Per algorithm, the (global batch, lr) of its points: the critical-lr grid, the batches."""
    scfg = cfg.sweep
    critical = {a: [(int(scfg.critical_batch), float(lr)) for lr in scfg.critical_lrs] for a in scfg.algorithms}
    batches = {a: [(int(g), scaled_lr(scfg, best_lr, g)) for g in scfg.global_batches] for a in scfg.algorithms}
    return critical, batches


def node_batch(settings: RunSettings) -> int:
    """Utterances a node computes at once: the smaller, the slower per utterance."""
    if settings.algorithm.startswith("ssgd") or settings.algorithm == BASELINE:
        return settings.global_batch
    return settings.per_learner_batch * settings.learners_per_node


class Runner(contextlib.ExitStack):
    """Trains runs (in sweep.jobs processes) and keeps sweep.json up to date. A context: its
    worker processes, started when a phase first needs them, serve every later phase (each
    spends seconds importing torch and loading the data) and stop when the block ends."""

    def __init__(self, cfg, results_path: Path, learner_losses: bool = False, keep_earlier: bool = False):
        super().__init__()
        self.cfg = cfg
        self.pool: ProcessPoolExecutor | None = None
        self.results_path = results_path
        self.done: list[dict] = previous_runs(results_path)
        self.in_file = list(self.done)  # what the results file held before this run
        self.runs: list[dict] = []
        self.learner_losses = learner_losses  # train_run's: every node's own held-out loss too
        self.noise = NoiseSettings.of(cfg.sweep)  # the baseline runs' gradient noise scale
        self.keep_earlier = keep_earlier  # the final save keeps the file's runs this one did not plan

    def previous(self, settings: RunSettings) -> dict | None:
        key = settings.key()
        return next((r for r in self.runs + self.done if stored_key(r, key) == key), None)

    def adopt(self, planned: list[RunSettings]) -> list[RunSettings]:
        """Takes the runs of `planned` done already into this sweep's; returns the others."""
        todo = []
        for settings in planned:
            found = self.previous(settings)
            if found is None:
                todo.append(settings)
            elif found not in self.runs:
                self.runs.append(found)
        return todo

    def run(self, planned: list[RunSettings], data: SweepData | None) -> None:
        unique = {json.dumps(s.key(), sort_keys=True): s for s in planned}
        planned = list(unique.values())
        todo = self.adopt(planned)
        if len(todo) < len(planned):
            log.info("%d runs done already (%s)", len(planned) - len(todo), self.results_path)
        todo.sort(key=node_batch)  # the slowest first, so that the last ones finishing are short
        if self.pool is None and min(int(self.cfg.sweep.jobs), len(todo)) <= 1:
            data = data if data is not None or not todo else SweepData(self.cfg)
            for settings in tqdm(todo, desc="sweep runs", disable=None, leave=False, dynamic_ncols=True):
                self.finished(train_run(data, settings, self.step_bar(settings), self.learner_losses, self.noise))
            return
        self.run_in_processes(todo)

    def step_bar(self, settings: RunSettings):
        bar = tqdm(
            desc=f"{settings.algorithm} {settings.global_batch} seed {settings.seed}",
            unit="step",
            disable=None,
            leave=False,
            dynamic_ncols=True,
        )
        return bar.update

    def run_in_processes(self, todo: list[RunSettings]) -> None:
        if self.pool is None:
            jobs = int(self.cfg.sweep.jobs)
            threads = max(1, int(self.cfg.train.threads) // jobs)
            config = OmegaConf.to_container(self.cfg, resolve=True)
            self.pool = self.enter_context(spawn_pool(jobs, initializer=_start_worker, initargs=(config, threads)))
        pending = {self.pool.submit(_train, settings, self.learner_losses, self.noise) for settings in todo}
        with tqdm(total=len(todo), desc="sweep runs", disable=None, leave=False, dynamic_ncols=True) as bar:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    self.finished(future.result())
                    bar.update()

    def finished(self, result: dict) -> None:
        self.runs.append(result)
        loss = "diverged" if result["diverged"] else f"held-out loss {result['held_out_loss']:.4f}"
        log.info(
            "%s at global batch %d, seed %d: %s after %d epochs (%.0f s)",
            result["algorithm"],
            result["global_batch"],
            result["seed"],
            loss,
            len(result["epochs_log"]),
            result["seconds"],
        )
        self.save()

    def save(self, head: dict | None = None) -> None:
        """While the sweep runs, the runs done before that it has not reached yet stay in the
        file; the final one (with `head`) holds this sweep's runs only, unless `keep_earlier`
        (the diagnostics, run a few at a time into one file) keeps the file's other runs too."""
        if head and not self.keep_earlier:
            others = []
        else:
            others = [r for r in (self.in_file if head else self.done) if r not in self.runs]
        write_text(
            self.results_path, json.dumps((head or {}) | {"runs": sorted_runs(self.runs) + others}, indent=1) + "\n"
        )


def stored_key(run: dict, key: dict) -> dict:
    """A finished run's values of `key`'s settings, as RunSettings.key() gives them."""
    stored = {k: run.get(k) for k in key}
    if isinstance(stored.get("train"), dict):
        stored["train"] = result_settings(stored["train"])
    return stored


def previous_runs(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    try:
        content = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: not the JSON a sweep writes ({err}); remove it to start the sweep afresh") from None
    return (
        content.get("runs", []) if isinstance(content, dict) else []
    )  # a list: an older format, whose runs never match


_worker_data: SweepData | None = None


def _start_worker(config: dict, threads: int) -> None:
    global _worker_data
    start_process(threads)  # torch and this module are imported by now: the worker's lifetime objects
    _worker_data = SweepData(OmegaConf.create(config))


def _train(settings: RunSettings, learner_losses: bool, noise: NoiseSettings | None) -> dict:
    return train_run(_worker_data, settings, learner_losses=learner_losses, noise=noise)


def sorted_runs(runs: list[dict]) -> list[dict]:
    return sorted(
        runs, key=lambda r: (r["algorithm"] != BASELINE, r["algorithm"], r["global_batch"], r["lr"], r["seed"])
    )


def run_sweep(cfg) -> SweepResult:
    check(cfg)
    cfg = with_train_config(cfg)
    with Runner(cfg, Path(cfg.sweep.out_dir) / "sweep.json") as runner:
        return sweep_with(runner, cfg)


def sweep_with(runner: Runner, cfg) -> SweepResult:
    """The sweep's phases (the module's docstring), their runs trained by `runner`."""
    scfg = cfg.sweep
    tolerance, margin = float(scfg.tolerance), float(scfg.close_margin)
    data = SweepData(cfg) if int(scfg.jobs) <= 1 else None
    rates = mixing(scfg)
    log.info(
        "sweep: %s, %d learners, %d epochs, %d jobs; per-step consensus rate (second-largest eigenvalue modulus of "
        "the expected mixing matrix): %s",
        ", ".join(scfg.algorithms),
        scfg.learners,
        scfg.epochs,
        scfg.jobs,
        ", ".join(f"{a} {m['consensus_rate']:.4f} ({m['topology']}, {m['nodes']} nodes)" for a, m in rates.items()),
    )
    seeds = list(dict.fromkeys([*scfg.seeds, *scfg.extra_seeds]))
    runner.run([run_settings(cfg, BASELINE, scfg.base_batch, lr, scfg.seeds[0]) for lr in scfg.baseline_lrs], data)
    best_lr = calibrate(runner.runs, tolerance).best.lr
    runner.run([run_settings(cfg, BASELINE, scfg.base_batch, best_lr, seed) for seed in seeds], data)
    baseline = calibrate(runner.runs, tolerance)
    log.info(
        "baseline: lr %g of %s, held-out loss %.4f (seeds %s); its last epoch improved it by %s: %s",
        best_lr,
        list(scfg.baseline_lrs),
        baseline.best.mean,
        baseline.best.seeds,
        improvements(baseline),
        "settled"
        if baseline.settled
        else f"NOT settled (less than {100 * tolerance / 2:g}% wanted): raise sweep.epochs",
    )
    if len(scfg.baseline_lrs) > 1 and best_lr in (min(scfg.baseline_lrs), max(scfg.baseline_lrs)):
        log.warning(
            "baseline: the best lr %g is at the edge of sweep.baseline_lrs %s; a wider grid may find a better one",
            best_lr,
            list(scfg.baseline_lrs),
        )
    critical_plan, batch_plan = plan(cfg, best_lr)
    points = [
        (a, b, lr)
        for wanted in (critical_plan, batch_plan)
        for a, coordinates in wanted.items()
        for b, lr in coordinates
    ]
    runner.run([run_settings(cfg, a, b, lr, seed) for a, b, lr in points for seed in scfg.seeds], data)
    # A point's extra seeds trained before (when it was close under another margin, or in an
    # earlier sweep) count whether or not it is close now: a verdict never drops a seed it has.
    runner.adopt([run_settings(cfg, a, b, lr, seed) for a, b, lr in points for seed in seeds])

    def measure() -> tuple[Measurement, Measurement]:
        return (
            judge(runner.runs, baseline, "critical_lr", "lr", critical_plan),
            judge(runner.runs, baseline, "largest_converging_batch", "global_batch", batch_plan),
        )

    critical, batches = measure()
    close = close_points(critical, tolerance, margin) + close_points(batches, tolerance, margin)
    extra = [
        run_settings(cfg, p.algorithm, p.global_batch, p.lr, seed)
        for p in close
        for seed in seeds
        if seed not in p.seeds
    ]
    if extra:
        log.info("%d points within %g of the tolerance: %d runs with sweep.extra_seeds", len(close), margin, len(extra))
        runner.run(extra, data)
        critical, batches = measure()
    setup = sweep_setup(cfg, runner.runs[0])
    noise = noise_summary(runner.runs, baseline, batches)
    runner.save(summary(baseline, critical, batches, rates, setup, noise))
    return SweepResult(sorted_runs(runner.runs), baseline, critical, batches, rates, setup, noise)


def improvements(baseline: Baseline) -> str:
    return ", ".join("?" if i is None else f"{100 * i:.2f}%" for i in baseline.last_improvements)


def sweep_setup(cfg, run: dict) -> dict:
    scfg = OmegaConf.to_container(cfg.sweep, resolve=True)
    return (
        {
            k: scfg[k]
            for k in (
                "algorithms",
                "learners",
                "learners_per_node",
                "epochs",
                "budget",
                "base_batch",
                "baseline_lrs",
                "critical_batch",
                "critical_lrs",
                "global_batches",
                "lr_scaling",
                "warmup_epochs",
                "same_init",
                "speeds",
                "speed_spread",
                "jitter",
                "exchange_time",
                "seeds",
                "extra_seeds",
                "close_margin",
                "tolerance",
                "max_train_utts",
                "noise_batches",
                "noise_rounds",
            )
        }
        | {
            k: run.get(k)
            for k in ("train_utterances", "held_out_utterances", "train_samples", "held_out_samples", "model", "train")
        }
        | {"regime": regime(scfg, run)}
    )


def regime(scfg: dict, run: dict) -> dict:
    """What decides whether the large-batch effect can show: how much data, how often each item
    is seen at the largest batch, how many updates that batch gets, and the lr schedule."""
    items = run.get("train_samples") or run["train_utterances"]
    largest = max(int(b) for b in [*scfg["global_batches"], scfg["critical_batch"]])
    passes = passes_per_epoch(OmegaConf.create(scfg), largest)
    return {
        "train_items": items,
        "unit": "samples" if run.get("train_samples") else "utterances",
        "epochs": scfg["epochs"],
        "largest_batch": largest,
        "visits_per_item_at_largest_batch": scfg["epochs"] * passes,
        "updates_at_largest_batch": scfg["epochs"] * passes * (items // largest),
        "lr_schedule": f"linear warm-up over {scfg['warmup_epochs']:g} epoch, then x{run['train'].get('lr_decay')} "
        "per epoch",
    }


def point_json(point: Point, tolerance: float) -> dict:
    return {
        "algorithm": point.algorithm,
        "global_batch": point.global_batch,
        "lr": point.lr,
        "held_out_loss": point.mean,
        "excess": point.excess,
        "losses": point.losses,
        "seeds": point.seeds,
        "spread": point.spread,
        "diverged": point.diverged,
        "converges": converges(point, tolerance),
        "train_slice_losses": point.train_losses,
        "failure": point.failure(tolerance),
    }


def measurement_json(m: Measurement, tolerance: float) -> dict:
    return {
        "value": m.largest,
        "ratio": m.ratio,
        "first_failing": m.first_failing,
        "ratio_range": m.ratio_range,
        "points": [point_json(p, tolerance) for series in m.points.values() for p in series],
    }


def noise_summary(runs: list[dict], baseline: Baseline, batches: Measurement) -> dict:
    """The gradient noise scale after every epoch of the baseline at its best lr (per seed, and
    their mean), beside the largest converging batches it should predict and the paper's."""
    best = sorted(
        (r for r in runs if r["algorithm"] == BASELINE and math.isclose(r["lr"], baseline.best.lr, rel_tol=1e-9)),
        key=lambda r: r["seed"],
    )
    per_seed = {r["seed"]: [(e.get("noise_scale") or {}).get("simple") for e in r["epochs_log"]] for r in best}
    epochs = max((len(v) for v in per_seed.values()), default=0)
    mean = []
    for epoch in range(epochs):
        values = [v[epoch] for v in per_seed.values() if epoch < len(v) and v[epoch] is not None]
        mean.append(sum(values) / len(values) if values else None)
    measured = next((e["noise_scale"] for r in best for e in r["epochs_log"] if e.get("noise_scale")), None)
    return {
        "per_epoch": mean,
        "per_seed": per_seed,
        "final": mean[-1] if mean else None,
        "small_batch": measured and measured["small_batch"],
        "big_batch": measured and measured["big_batch"],
        "rounds": measured and measured["batches"],
        "largest_converging_batch": batches.largest,
        "paper_switchboard": PAPER_SWITCHBOARD,
    }


def summary(
    baseline: Baseline, critical: Measurement, batches: Measurement, rates: dict, setup: dict, noise: dict
) -> dict:
    """sweep.json's head: the baseline's calibration, both verdicts with every point, mixing,
    the gradient noise scale."""
    best, tolerance = baseline.best, baseline.tolerance
    grid = [point_json(p, tolerance) | {"converges": None} for p in baseline.grid]
    return {
        "critical_lr": {"global_batch": setup["critical_batch"], "lrs": setup["critical_lrs"]}
        | measurement_json(critical, tolerance),
        "largest_converging_batch": {"lr_scaling": setup["lr_scaling"], "lr_at_base_batch": best.lr}
        | measurement_json(batches, tolerance),
        "baseline": {
            "global_batch": best.global_batch,
            "lr_grid": grid,
            "best_lr": best.lr,
            "best_lr_at_grid_edge": best.lr in (min(setup["baseline_lrs"]), max(setup["baseline_lrs"])),
            "held_out_loss": best.mean,
            "losses": best.losses,
            "seeds": best.seeds,
            "spread": best.spread,
            "last_epoch_improvements": baseline.last_improvements,
            "settled": baseline.settled,
        },
        "noise_scale": noise,
        "tolerance": tolerance,
        "threshold": baseline.threshold,
        "close_margin": setup["close_margin"],
        "budget": BUDGET[setup.get("budget", "epochs")],
        "mixing": rates,
        "setup": setup,
    }
