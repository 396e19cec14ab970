"""The whole sweep: which runs, in which order, side by side, and where the results go.

First the baseline with every seed (sweep.seeds and sweep.extra_seeds: its spread is the noise
the tolerance is judged against) and every (algorithm, global batch) with sweep.seeds; then
the extra seeds for the points close to the convergence threshold (verdict.py). Runs are
trained in sweep.jobs processes side by side; each is deterministic from its settings, so
the order they finish in changes nothing.

`<sweep.out_dir>/sweep.json` is rewritten after every run, so an interrupted sweep goes on
with the runs it has not done (a run is identified by its settings, run.RunSettings).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import OmegaConf
from tqdm import tqdm

from asr.sweep.run import BASELINE, RunSettings, SweepData, run_settings, train_run
from asr.sweep.verdict import Verdict, close_points, judge
from asr.utils.atomic import write_text
from asr.utils.errors import InputError

log = logging.getLogger(__name__)


@dataclass
class SweepResult:
    runs: list[dict]
    verdict: Verdict
    setup: dict


def check(cfg) -> None:
    """Settings that are each valid but do not fit together."""
    scfg = cfg.sweep
    for batch in scfg.global_batches:
        if batch % scfg.learners:
            raise InputError(f"sweep.global_batches: {batch} is not a multiple of sweep.learners={scfg.learners}")
    if any(a.startswith("hadpsgd") for a in scfg.algorithms) and scfg.learners % scfg.learners_per_node:
        raise InputError(f"sweep.learners_per_node={scfg.learners_per_node} does not divide sweep.learners={scfg.learners}")
    if scfg.speeds and len(scfg.speeds) != scfg.learners:
        raise InputError(f"sweep.speeds: {len(scfg.speeds)} speeds for sweep.learners={scfg.learners}; give one per learner, or [] to draw them")
    if not scfg.seeds:
        raise InputError("sweep.seeds is empty: give at least one seed")
    if not scfg.algorithms:
        raise InputError("sweep.algorithms is empty: name at least one algorithm (ssgd, adpsgd, ...)")


def first_runs(cfg) -> list[RunSettings]:
    scfg = cfg.sweep
    seeds = list(dict.fromkeys([*scfg.seeds, *scfg.extra_seeds]))
    runs = [run_settings(cfg, BASELINE, scfg.base_batch, seed) for seed in seeds]
    runs += [run_settings(cfg, a, g, seed) for a in scfg.algorithms for g in scfg.global_batches for seed in scfg.seeds]
    return runs


def node_batch(settings: RunSettings) -> int:
    """Utterances a node computes at once: the smaller, the slower per utterance."""
    if settings.algorithm.startswith("ssgd") or settings.algorithm == BASELINE:
        return settings.global_batch
    return settings.per_learner_batch * settings.learners_per_node


class Runner:
    """Trains runs (in sweep.jobs processes) and keeps sweep.json up to date."""

    def __init__(self, cfg, results_path: Path):
        self.cfg = cfg
        self.results_path = results_path
        self.done: list[dict] = previous_runs(results_path)
        self.runs: list[dict] = []

    def previous(self, settings: RunSettings) -> dict | None:
        key = settings.key()
        return next((r for r in self.done if {k: r.get(k) for k in key} == key), None)

    def run(self, planned: list[RunSettings], data: SweepData | None) -> None:
        todo = []
        for settings in planned:
            found = self.previous(settings)
            if found is None:
                todo.append(settings)
            elif found not in self.runs:
                self.runs.append(found)
        if len(todo) < len(planned):
            log.info("%d runs done already (%s)", len(planned) - len(todo), self.results_path)
        todo.sort(key=node_batch)  # the slowest first, so that the last ones finishing are short
        jobs = min(int(self.cfg.sweep.jobs), len(todo))
        if jobs <= 1:
            data = data if data is not None or not todo else SweepData(self.cfg)
            for settings in tqdm(todo, desc="sweep runs", disable=None, leave=False, dynamic_ncols=True):
                self.finished(train_run(data, settings, self.step_bar(settings)))
            return
        self.run_in_processes(todo, jobs)

    def step_bar(self, settings: RunSettings):
        bar = tqdm(desc=f"{settings.algorithm} {settings.global_batch} seed {settings.seed}", unit="step", disable=None, leave=False,
                   dynamic_ncols=True)
        return bar.update

    def run_in_processes(self, todo: list[RunSettings], jobs: int) -> None:
        threads = max(1, int(self.cfg.train.threads) // jobs)
        config = OmegaConf.to_container(self.cfg, resolve=True)
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no torch threads forked
        with ProcessPoolExecutor(jobs, mp_context=context, initializer=_start_worker, initargs=(config, threads)) as pool:
            pending = {pool.submit(_train, settings) for settings in todo}
            with tqdm(total=len(todo), desc="sweep runs", disable=None, leave=False, dynamic_ncols=True) as bar:
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in finished:
                        self.finished(future.result())
                        bar.update()

    def finished(self, result: dict) -> None:
        self.runs.append(result)
        loss = "diverged" if result["diverged"] else f"held-out loss {result['held_out_loss']:.4f}"
        log.info("%s at global batch %d, seed %d: %s after %d epochs (%.0f s)", result["algorithm"], result["global_batch"],
                 result["seed"], loss, len(result["epochs_log"]), result["seconds"])
        self.save()

    def save(self, head: dict | None = None) -> None:
        """While the sweep runs, the runs done before that it has not reached yet stay in the
        file; the final one (with `head`) holds this sweep's runs only."""
        others = [] if head else [r for r in self.done if r not in self.runs]
        write_text(self.results_path, json.dumps((head or {}) | {"runs": sorted_runs(self.runs) + others}, indent=1) + "\n")


def previous_runs(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    try:
        content = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: not the JSON a sweep writes ({err}); remove it to start the sweep afresh") from None
    return content.get("runs", []) if isinstance(content, dict) else []  # a list: an older format, whose runs never match


_worker_data: SweepData | None = None


def _start_worker(config: dict, threads: int) -> None:
    global _worker_data
    torch.set_num_threads(threads)
    _worker_data = SweepData(OmegaConf.create(config))


def _train(settings: RunSettings) -> dict:
    return train_run(_worker_data, settings)


def sorted_runs(runs: list[dict]) -> list[dict]:
    return sorted(runs, key=lambda r: (r["algorithm"] != BASELINE, r["algorithm"], r["global_batch"], r["seed"]))


def run_sweep(cfg) -> SweepResult:
    check(cfg)
    scfg = cfg.sweep
    out_dir = Path(scfg.out_dir)
    data = SweepData(cfg) if int(scfg.jobs) <= 1 else None
    runner = Runner(cfg, out_dir / "sweep.json")
    log.info("sweep: %s, %d learners, global batches %s, %d epochs, %d jobs", ", ".join(scfg.algorithms), scfg.learners,
             list(scfg.global_batches), scfg.epochs, scfg.jobs)
    runner.run(first_runs(cfg), data)
    verdict = judge(runner.runs, float(scfg.tolerance), list(scfg.algorithms))
    extra = [run_settings(cfg, p.algorithm, p.global_batch, seed) for p in close_points(verdict, float(scfg.close_margin))
             for seed in scfg.extra_seeds if seed not in p.seeds]
    if extra:
        log.info("%d points close to the threshold %.4f: %d runs with sweep.extra_seeds", len({(s.algorithm, s.global_batch) for s in extra}),
                 verdict.threshold, len(extra))
        runner.run(extra, data)
        verdict = judge(runner.runs, float(scfg.tolerance), list(scfg.algorithms))
    setup = sweep_setup(cfg, runner.runs[0])
    runner.save(summary(verdict, setup))
    return SweepResult(sorted_runs(runner.runs), verdict, setup)


def sweep_setup(cfg, run: dict) -> dict:
    scfg = OmegaConf.to_container(cfg.sweep, resolve=True)
    return {k: scfg[k] for k in ("algorithms", "learners", "learners_per_node", "global_batches", "epochs", "base_batch", "optimizer",
                                 "lr", "lr_scaling", "momentum", "nesterov", "warmup_epochs", "lr_decay", "grad_clip", "same_init", "speeds", "speed_spread", "jitter", "exchange_time", "seeds", "extra_seeds",
                                 "close_margin", "tolerance", "max_train_utts")} | {k: run[k] for k in ("train_utterances", "held_out_utterances", "model")}


def summary(verdict: Verdict, setup: dict) -> dict:
    """sweep.json's head: what converged, the ratio, and every point's mean over its seeds."""
    points = [{"algorithm": p.algorithm, "global_batch": p.global_batch, "held_out_loss": p.mean, "excess": p.excess, "losses": p.losses,
               "seeds": p.seeds, "converges": verdict.converges(p)} for series in verdict.points.values() for p in series]
    base = verdict.baseline
    return {
        "largest_converging_batch": verdict.largest_converging_batch, "ratio": verdict.ratio,
        "baseline": {"global_batch": base.global_batch, "held_out_loss": base.mean, "losses": base.losses, "seeds": base.seeds,
                     "spread": base.spread},
        "tolerance": verdict.tolerance, "threshold": verdict.threshold, "setup": setup, "points": points,
    }
