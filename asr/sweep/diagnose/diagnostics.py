"""Why ADPSGD lags SSGD in the sweep: targeted runs that change one candidate cause at a time.

`python -m asr.sweep.diagnose` (the sweep's own overrides, after `python -m asr.sweep` has
calibrated the baseline in the same sweep.out_dir) trains each of `DIAGNOSTICS` at
sweep.base_batch and sweep.critical_batch, with the best baseline lr scaled to the batch as the
sweep does, and sweep.seeds. ADPSGD's learners' average moves as SSGD would (pairwise averaging
keeps the mean of the weights), except that each learner's gradient is taken at its own weights,
late by the clock's delays, and with its own momentum; so the candidates are

    mixing       how fast pairwise averaging pulls the learners together (topology)
    staleness    the clock: speeds, jitter and exchange time (lockstep: all 0)
    noise        each learner's batch (4 learners: 4x the samples a learner, at the same global batch)
    momentum     a momentum buffer per learner (momentum 0 at the same effective lr, lr / (1 - 0.9))

and, since 4 learners at the same global batch change both the number of nodes and each
learner's batch, two runs that change one of them at the same lr, each against SSGD at its own
global batch (a diagnostic's `batch_factor`):

    per-learner batch  16 learners at the 4-learner run's samples each (4x the global batch)
    nodes              4 learners at the sweep's samples each (1/4 the global batch)

and every run also records each learner's own held-out loss per epoch beside the average's and
the spread. Written to <sweep.out_dir>/diagnostics.{json,md}; the json keeps every run, so an
interrupted run goes on where it stopped.
"""

from __future__ import annotations

import math
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from asr.sweep.run import run_settings, scaled_lr, sweep_batches, with_train_config
from asr.sweep.sweep import Runner, check, mixing, nodes, previous_runs
from asr.sweep.verdict import Baseline, calibrate
from asr.utils.atomic import write_text
from asr.utils.errors import InputError

MOMENTUM = 0.9  # the sweep's; momentum 0 runs at lr / (1 - MOMENTUM): the same step in the long run


@dataclass(frozen=True)
class Diagnostic:
    name: str
    algorithm: str
    cause: str  # the candidate it isolates (or "reference")
    change: str  # what differs from the sweep's ADPSGD, in words
    sweep: dict = field(default_factory=dict)  # overrides of sweep.*
    lr_factor: float = 1.0  # x the sweep's scaled lr
    reference: str = "ssgd"  # the SSGD run it is compared with (at the same global batch and lr)
    # x the diagnostic batch: the run's global batch; its lr stays the diagnostic batch's, so
    # that only the per-learner batch (or, with fewer learners, only the number of nodes) changes
    batch_factor: float = 1.0


NO_MOMENTUM = {"train": {"momentum": 0.0, "nesterov": False}}
DIAGNOSTICS = (
    Diagnostic("ssgd", "ssgd", "reference", "SSGD as in the sweep"),
    Diagnostic("adpsgd", "adpsgd", "reference", "ADPSGD as in the sweep: fixed ring, speeds, jitter, exchange time"),
    Diagnostic("adpsgd_exponential", "adpsgd_exponential", "mixing", "one-peer exponential graph"),
    Diagnostic("adpsgd_random_ring", "adpsgd_random_ring", "mixing", "random ring"),
    Diagnostic(
        "adpsgd_lockstep",
        "adpsgd",
        "staleness",
        "equal speeds, no jitter, no exchange time (lockstep)",
        {"speed_spread": 0.0, "jitter": 0.0, "exchange_time": 0.0},
    ),
    Diagnostic("adpsgd_4_learners", "adpsgd", "noise", "4 learners (4x the samples each)", {"learners": 4}),
    Diagnostic("ssgd_batch_x4", "ssgd", "reference", "SSGD at 4x the global batch, the same lr", batch_factor=4.0),
    Diagnostic(
        "adpsgd_batch_x4",
        "adpsgd",
        "per-learner batch",
        "16 learners at 4x the samples each (4x the global batch), the same lr",
        reference="ssgd_batch_x4",
        batch_factor=4.0,
    ),
    Diagnostic("ssgd_batch_div4", "ssgd", "reference", "SSGD at 1/4 the global batch, the same lr", batch_factor=0.25),
    Diagnostic(
        "adpsgd_4_learners_batch_div4",
        "adpsgd",
        "nodes",
        "4 learners at the sweep's samples each (1/4 the global batch), the same lr",
        {"learners": 4},
        reference="ssgd_batch_div4",
        batch_factor=0.25,
    ),
    Diagnostic(
        "ssgd_momentum_0",
        "ssgd",
        "reference",
        "SSGD, momentum 0 at lr x 10",
        NO_MOMENTUM,
        1 / (1 - MOMENTUM),
    ),
    Diagnostic(
        "adpsgd_momentum_0",
        "adpsgd",
        "momentum",
        "momentum 0 at lr x 10",
        NO_MOMENTUM,
        1 / (1 - MOMENTUM),
        "ssgd_momentum_0",
    ),
)


def variant_config(cfg, diagnostic: Diagnostic):
    return with_train_config(OmegaConf.merge(cfg, {"sweep": diagnostic.sweep}))


def diagnostic_batches(scfg) -> list[int]:
    """sweep.diagnostic_batches, or the baseline's and the critical batch; the quicker (larger) first."""
    batches = scfg.diagnostic_batches or (scfg.base_batch, scfg.critical_batch)
    for batch in batches:
        if batch % scfg.learners:
            raise InputError(f"sweep.diagnostic_batches: {batch} is not a multiple of sweep.learners={scfg.learners}")
    return sorted({int(b) for b in batches}, reverse=True)


def run_batch(scfg, diagnostic: Diagnostic, batch: int) -> int:
    """The global batch a diagnostic trains at the diagnostic batch `batch`: one whose full
    batches tile every epoch of the sweep's (so its data are the sweep's, its SSGD runs alike)."""
    vcfg = OmegaConf.merge(scfg, diagnostic.sweep)
    global_batch = batch * diagnostic.batch_factor
    unit = math.lcm(*sweep_batches(scfg))
    if global_batch != int(global_batch) or global_batch % vcfg.learners or unit % global_batch:
        raise InputError(
            f"sweep.diagnostic_batches: {batch} x {diagnostic.batch_factor:g} ({diagnostic.name}) is not a multiple of "
            f"its {vcfg.learners} learners dividing {unit} (the sweep's batches' multiple); choose another batch"
        )
    return int(global_batch)


def sweep_baseline(cfg) -> tuple[Baseline, list[dict]]:
    """The calibrated baseline of the sweep in the same out_dir, and its runs."""
    path = Path(cfg.sweep.out_dir) / "sweep.json"
    runs = previous_runs(path)
    try:
        return calibrate(runs, float(cfg.sweep.tolerance)), runs
    except ValueError:
        raise InputError(
            f"{path}: no baseline runs; run python -m asr.sweep with the same overrides first "
            "(its baseline is calibrated before anything else)"
        ) from None


def planned(cfg, best_lr: float, diagnostics=DIAGNOSTICS) -> list[tuple[Diagnostic, int, object]]:
    """(diagnostic, diagnostic batch, its run settings) for every batch and seed, the quicker
    batch first; the lr is the diagnostic batch's whatever the run's global batch."""
    out = []
    for batch in diagnostic_batches(cfg.sweep):
        for diagnostic in diagnostics:
            vcfg = variant_config(cfg, diagnostic)
            lr = scaled_lr(vcfg.sweep, best_lr, batch) * diagnostic.lr_factor
            global_batch = run_batch(cfg.sweep, diagnostic, batch)
            out += [
                (diagnostic, batch, run_settings(vcfg, diagnostic.algorithm, global_batch, lr, seed))
                for seed in cfg.sweep.seeds
            ]
    return out


def chosen(cfg, diagnostics=DIAGNOSTICS) -> tuple[Diagnostic, ...]:
    """sweep.diagnostics' runs ([]: all), with the SSGD runs they are compared with."""
    names = list(cfg.sweep.diagnostics)
    known = {d.name: d for d in diagnostics}
    if unknown := [n for n in names if n not in known]:
        raise InputError(f"sweep.diagnostics: {unknown} unknown; choose from {list(known)}")
    if not names:
        return tuple(diagnostics)
    wanted = set(names) | {known[n].reference for n in names}
    return tuple(d for d in diagnostics if d.name in wanted)


def run_diagnostics(cfg, diagnostics=DIAGNOSTICS) -> dict:
    check(cfg)
    diagnostics = chosen(cfg, diagnostics)
    cfg = with_train_config(cfg)
    baseline, sweep_runs = sweep_baseline(cfg)
    out_dir = Path(cfg.sweep.out_dir)
    plan = planned(cfg, baseline.best.lr, diagnostics)
    with Runner(cfg, out_dir / "diagnostics.json", learner_losses=True, keep_earlier=True) as runner:
        # SSGD has one node (its learners' average is its model): the sweep's own runs serve
        runner.done += [r for r in sweep_runs if r["algorithm"] == "ssgd"]
        for batch in diagnostic_batches(cfg.sweep):
            runner.run([s for _, b, s in plan if b == batch], None)
    head = summary(cfg, baseline, plan, runner, diagnostics)
    runner.save(head)
    write_text(out_dir / "diagnostics.md", diagnostics_md(head))
    return head


def summary(cfg, baseline: Baseline, plan, runner: Runner, diagnostics) -> dict:
    by_seed = dict(zip(baseline.best.seeds, baseline.best.losses))
    results = {}
    for diagnostic, batch, settings in plan:
        results[(diagnostic.name, batch, settings.seed)] = runner.previous(settings)
    rows = []
    for (name, batch, seed), run in results.items():
        diagnostic = next(d for d in diagnostics if d.name == name)
        reference = results.get((diagnostic.reference, batch, seed))
        rows.append({"diagnostic_batch": batch} | row(diagnostic, run, reference, by_seed.get(seed), cfg))
    return {
        "command": "python -m asr.sweep.diagnose " + " ".join(sys.argv[1:]),
        "baseline": {"lr": baseline.best.lr, "losses": baseline.best.losses, "seeds": baseline.best.seeds},
        "tolerance": baseline.tolerance,
        "diagnostics": rows,
    }


def loss_or_none(run: dict | None) -> float | None:
    return None if run is None else run["held_out_loss"]


def relative(loss: float | None, reference: float | None) -> float | None:
    return None if loss is None or not reference else loss / reference - 1


def row(diagnostic: Diagnostic, run: dict, reference: dict | None, baseline: float | None, cfg) -> dict:
    vcfg = variant_config(cfg, diagnostic)
    rate = mixing(OmegaConf.merge(vcfg.sweep, {"algorithms": [diagnostic.algorithm]}))[diagnostic.algorithm]
    loss = loss_or_none(run)
    return {
        "name": diagnostic.name,
        "cause": diagnostic.cause,
        "change": diagnostic.change,
        "algorithm": diagnostic.algorithm,
        "overrides": diagnostic.sweep,
        "global_batch": run["global_batch"],
        "learners": run["learners"],
        "nodes": nodes(vcfg.sweep, diagnostic.algorithm),
        "per_learner_batch": run["per_learner_batch"],
        "lr": run["lr"],
        "seed": run["seed"],
        "consensus_rate": rate["consensus_rate"],
        "held_out_loss": loss,
        "diverged": run["diverged"],
        "excess": relative(loss, baseline),
        "reference": diagnostic.reference,
        "over_reference": relative(loss, loss_or_none(reference)) if diagnostic.name != diagnostic.reference else None,
        "epochs": [epoch_row(e) for e in run["epochs_log"]],
    }


def epoch_row(epoch: dict) -> dict:
    learners = [x for x in epoch.get("learner_held_out", []) if x is not None]
    return {
        "epoch": epoch["epoch"],
        "held_out_loss": epoch["held_out_loss"],
        "spread": epoch["spread"],
        "learners_best": min(learners) if learners else None,
        "learners_mean": statistics.fmean(learners) if learners else None,
        "learners_worst": max(learners) if learners else None,
    }


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f}%"


def number(value: float | None, digits: int = 4) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def diagnostics_md(head: dict) -> str:
    lines = [
        "# Why ADPSGD lags SSGD: diagnostic runs",
        "",
        f"Command: `{head['command']}`. Baseline (one learner) lr {head['baseline']['lr']:g}, held-out loss per seed "
        + ", ".join(f"{s}: {loss:.4f}" for s, loss in zip(head["baseline"]["seeds"], head["baseline"]["losses"]))
        + ". `excess`: over the baseline of the run's seed; `vs ref`: over the SSGD run named in `ref` (same batch, "
        "lr and seed). Last epoch: the learners' average, then each learner's own model (best / mean / worst), and "
        "the spread (max |w_i - mean| / |mean|).",
        "",
        "| run | cause | change | batch | learners | per learner | lr | seed | consensus rate | held-out | excess | "
        "vs ref | learners best / mean / worst | spread |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in head["diagnostics"]:
        last = r["epochs"][-1] if r["epochs"] else {}
        learners = " / ".join(number(last.get(k)) for k in ("learners_best", "learners_mean", "learners_worst"))
        lines.append(
            f"| {r['name']} | {r['cause']} | {r['change']} | {r['global_batch']} | {r['learners']} | "
            f"{r['per_learner_batch']} | {r['lr']:g} | "
            f"{r['seed']} | "
            f"{r['consensus_rate']:.3f} | {'diverged' if r['diverged'] else number(r['held_out_loss'])} | "
            f"{percent(r['excess'])} | {percent(r['over_reference'])} ({r['reference']}) | {learners} | "
            f"{number(last.get('spread'))} |"
        )
    return "\n".join(lines) + "\n"
