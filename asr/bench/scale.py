"""How each stage's cost grows with the corpus: time, memory and disk at three sizes, the growth
exponent, and what that predicts for Switchboard-300 and Switchboard-2000.

    python -m asr.bench scale [--sizes 40 120 360] [--recipes logmel40 fmllr40 ...] [--steps 20] [--frames 6000]
                              [--jobs 2] [--repeats 2] [--startups 3] [--out exp/bench] [overrides...]

For each size (synthetic conversations) it runs, through the stages' own entry points
(`python -m asr.<stage>`), as the mini recipe does: synth, prepare, validate, features (each of
--recipes), tokenizer, lm, and `--steps` training steps of one learner. Per stage and size:

    seconds, seconds_per_hour      wall time, and per hour of training audio
    peak_rss_mb                    the largest total resident memory of the stage's whole
                                   process tree (sampled every 50 ms; at least largest_process_mb)
    largest_process_mb             the largest resident memory of any one process of it: the
                                   kernel's high-water mark (wait4), exact, where sampling can
                                   miss a transient (a worker pool's churn, an exiting worker
                                   beside its successor, adds to the tree's total but not to this)
    *_runs                         each of --repeats runs (the stage's outputs removed between
                                   them); the figures above are the fastest and the smallest
                                   peaks (a heap's layout, so its peak, varies between runs)
    disk_mb, disk_mb_per_hour      what the stage wrote
and for training the learner's start-up (process start to its first step, building the training
index) and its peak memory until then (what it holds for the corpus, before any batch's
activations): the fastest and the largest of --startups start-ups; and the fastest of the
start-up's part spent on the data sets (the index built, the sets filtered).

Fits, per stage over the sizes: the exponent k of seconds ~ hours^k (least squares on logs),
the marginal exponent between the two largest sizes (at small sizes start-up dominates and
flattens k), seconds = fixed + per_hour x hours (least squares), and the growth in bytes per
training utterance of the tree's peak memory (least squares, and between the two largest sizes:
a fixed budget such as the fMLLR model's training frames fills up at small sizes) and of the
largest process's. Extrapolated to 300 h and 2,000 h with the linear
model (a power law fitted where start-up dominates would predict far too little): fixed +
per_hour x hours, the per-hour part divided by jobs_target / --jobs for the stages that split
over jobs (synth, features), for a machine of --jobs-target cores. Writes scale.json and
scale.png into --out.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from asr.bench.output import machine, settings, write_report
from asr.utils.atomic import atomic_path
from asr.utils.log import log_to_stderr

log = logging.getLogger("asr.bench.scale")

PARALLEL_STAGES = ("synth", "features")  # split over jobs (synth.jobs, features.jobs)
TARGETS_HOURS = {"swb300": 300.0, "swb2000": 2000.0}


def tree_rss_bytes(root: int) -> dict[int, int]:
    """Resident memory of `root` and each of its descendants, by pid (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        rss[pid] = int(fields[21]) * page
    tree, stack = {}, [root]
    while stack:
        pid = stack.pop()
        tree[pid] = rss.get(pid, 0)
        stack += children.get(pid, [])
    return tree


def run_measured(cmd: list[str], cwd: Path, log_path: Path) -> dict:
    """Run `cmd`; wall seconds, the peak RSS of its process tree (sampled; at least its largest
    process's) and of its largest process (exact)."""
    start = time.perf_counter()
    with open(log_path, "w") as out:
        proc = subprocess.Popen(
            cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1")
        )
    peak, largest = [0], [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            tree = tree_rss_bytes(proc.pid)
            peak[0], largest[0] = max(peak[0], sum(tree.values())), max(largest[0], *tree.values())
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    # wait4's ru_maxrss is the kernel's high-water mark of the child and of every descendant it
    # waited for: exact, where sampling misses a peak shorter than its period.
    _, wait_status, usage = os.wait4(proc.pid, 0)
    proc.returncode = status = os.waitstatus_to_exitcode(wait_status)
    done.set()
    sampler.join()
    if status != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({status}); see {log_path}:\n{log_path.read_text()[-2000:]}")
    largest_mb = max(usage.ru_maxrss * 1024, largest[0]) / 2**20  # ru_maxrss is in KiB
    return {
        "seconds": time.perf_counter() - start,
        "peak_rss_mb": max(peak[0] / 2**20, largest_mb),
        "largest_process_mb": largest_mb,
    }


def disk_mb(*paths: Path) -> float:
    total = 0
    for path in paths:
        if path.is_file():
            total += path.stat().st_size
        elif path.is_dir():
            total += sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return total / 2**20


def training_hours(data_dir: Path) -> tuple[float, int]:
    """Hours of speech in the training set's segments, and its utterances."""
    seconds, count = 0.0, 0
    for line in (data_dir / "segments").read_text().splitlines():
        _, _, start, end = line.split()
        seconds += float(end) - float(start)
        count += 1
    return seconds / 3600, count


class SizeRun:
    """Every stage at one corpus size, in a directory of its own."""

    def __init__(self, args, work: Path, conversations: int):
        self.args, self.dir = args, work / f"c{conversations}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.conversations = conversations
        self.common = [
            f"synth.train_conversations={conversations}",
            f"synth.out_dir={self.dir / 'corpus'}",
            f"synth.jobs={args.jobs}",
            f"data.data_dir={self.dir / 'data'}",
            f"features.feats_dir={self.dir / 'feats'}",
            f"features.jobs={args.jobs}",
            f"tokenizer.lang_dir={self.dir / 'lang'}",
            *args.overrides,
        ]

    def command(self, module: str, *extra: str) -> list[str]:
        """A stage's entry point with the size's directories, as the mini recipe runs it."""
        return [sys.executable, "-m", module, *self.common, f"exp_dir={self.dir / 'exp'}", *extra]

    def stage(self, name: str, cmd: list[str], outputs: tuple[str, ...] = (), fresh: tuple[str, ...] = ()) -> dict:
        """`cmd` --repeats times, its `outputs` and `fresh` (glob patterns in the size's
        directory) removed before each repeat, which would otherwise find its work done."""
        runs = []
        for repeat in range(self.args.repeats):
            if repeat:
                self.remove(*outputs, *fresh)
            runs.append(run_measured(cmd, self.dir, self.dir / f"{name}.log"))
        result = {key: min(run[key] for run in runs) for key in runs[0]}
        result |= {f"{key}_runs": [run[key] for run in runs] for key in runs[0]}
        result["disk_mb"] = disk_mb(*(path for pattern in outputs for path in self.dir.glob(pattern)))
        log.info(
            "%d conversations, %s: %.1f s, peak %.0f MB (largest process %.0f MB)",
            self.conversations,
            name,
            result["seconds"],
            result["peak_rss_mb"],
            result["largest_process_mb"],
        )
        return result

    def remove(self, *patterns: str) -> None:
        for pattern in patterns:
            for path in self.dir.glob(pattern):
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()

    def training(self, recipe: str, steps: int) -> list[str]:
        # Batches of a fixed number of padded frames: the steps' activations then take the same
        # memory at every size, and the growth left is the learner's bookkeeping.
        return [
            f"features={recipe}",
            f"train.max_steps={steps}",
            "train.max_utts=1000",
            f"train.max_frames={self.args.frames}",
            "train.threads=1",
            "train.checkpoint_every_steps=100000",
            "train.tensorboard=false",
        ]

    @staticmethod
    def index(recipe: str) -> str:
        """The training index a learner builds at its first start (asr.train.index)."""
        return f"feats/{recipe}/*/index.*"

    def startups(self, recipe: str) -> dict:
        """The learner's start-up, --startups times, each building the training index afresh:
        the 20-step run's, then one-step runs in exp dirs of their own. A start-up takes about a
        second and varies by a tenth from run to run on a shared machine, as much as 14,000
        utterances at 7 microseconds each: the fastest and the largest peak are reported, and
        the fastest of the part that handles the utterances (the training and dev sets' index
        built, the sets filtered), which does not vary so."""
        samples = [json.loads((self.dir / "exp" / "timing" / "learner-0.json").read_text())]
        for repeat in range(1, self.args.startups):
            self.remove(self.index(recipe))
            exp = self.dir / f"exp_startup{repeat}"
            run_measured(
                [sys.executable, "-m", "asr.train", *self.common, f"exp_dir={exp}", *self.training(recipe, 1)],
                self.dir,
                self.dir / f"startup{repeat}.log",
            )
            samples.append(json.loads((exp / "timing" / "learner-0.json").read_text()))
        seconds, peaks = [t["startup_seconds"] for t in samples], [t["startup_peak_rss_mb"] for t in samples]
        datasets = [t["startup_datasets_seconds"] for t in samples]
        return {
            "startup_seconds": min(seconds),
            "startup_peak_rss_mb": max(peaks),
            "startup_datasets_seconds": min(datasets),
            "startup_seconds_runs": seconds,
            "startup_peak_rss_mb_runs": peaks,
            "startup_datasets_seconds_runs": datasets,
        }

    def run(self) -> dict:
        out: dict = {"conversations": self.conversations, "stages": {}}
        stages = out["stages"]
        stages["synth"] = self.stage("synth", self.command("asr.data.synth"), outputs=("corpus",))
        stages["prepare"] = self.stage("prepare", self.command("asr.data.prepare"), outputs=("data",))
        hours, utts = training_hours(self.dir / "data" / "train")
        out["hours"], out["utterances"] = hours, utts
        stages["validate"] = self.stage(
            "validate", [sys.executable, "-m", "asr.data.validate", str(self.dir / "data" / "train")]
        )
        for recipe in self.args.recipes:
            stages[f"features:{recipe}"] = self.stage(
                f"features_{recipe}", self.command("asr.features", f"features={recipe}"), outputs=(f"feats/{recipe}",)
            )
        first = self.args.recipes[0]
        stages["tokenizer"] = self.stage("tokenizer", self.command("asr.text", f"features={first}"), outputs=("lang",))
        stages["lm"] = self.stage("lm", self.command("asr.lm", f"features={first}"), fresh=("lang/lm",))
        stages["train"] = self.stage(
            "train", self.command("asr.train", *self.training(first, self.args.steps)), fresh=("exp", self.index(first))
        )
        stages["train"] |= self.startups(first)
        for entry in stages.values():
            entry["seconds_per_hour"] = entry["seconds"] / hours
            entry["disk_mb_per_hour"] = entry["disk_mb"] / hours
        return out


def fit(sizes: list[dict]) -> dict:
    """Per stage: growth exponent of time in hours, memory and start-up growth per utterance."""
    hours = np.array([s["hours"] for s in sizes])
    utts = np.array([s["utterances"] for s in sizes], dtype=float)
    fits = {}
    for stage in sizes[0]["stages"]:
        seconds = np.array([s["stages"][stage]["seconds"] for s in sizes])
        rss = np.array([s["stages"][stage]["peak_rss_mb"] for s in sizes]) * 2**20
        largest = np.array([s["stages"][stage]["largest_process_mb"] for s in sizes]) * 2**20
        per_hour, fixed = np.polyfit(hours, seconds, 1)
        entry = {
            "exponent": float(np.polyfit(np.log(hours), np.log(seconds), 1)[0]),
            "marginal_exponent": float(np.log(seconds[-1] / seconds[-2]) / np.log(hours[-1] / hours[-2])),
            "fixed_seconds": float(fixed),
            "seconds_per_hour": float(max(per_hour, 0.0)),
            "memory_bytes_per_utterance": float(np.polyfit(utts, rss, 1)[0]),
            "marginal_memory_bytes_per_utterance": float((rss[-1] - rss[-2]) / (utts[-1] - utts[-2])),
            "largest_process_bytes_per_utterance": float(np.polyfit(utts, largest, 1)[0]),
        }
        if stage == "train":
            startup = np.array([s["stages"][stage]["startup_seconds"] for s in sizes])
            entry["startup_microseconds_per_utterance"] = float(np.polyfit(utts, startup, 1)[0] * 1e6)
            datasets = np.array([s["stages"][stage]["startup_datasets_seconds"] for s in sizes])
            entry["startup_datasets_microseconds_per_utterance"] = float(np.polyfit(utts, datasets, 1)[0] * 1e6)
            startup_rss = np.array([s["stages"][stage]["startup_peak_rss_mb"] for s in sizes]) * 2**20
            entry["startup_memory_bytes_per_utterance"] = float(np.polyfit(utts, startup_rss, 1)[0])
        fits[stage] = entry
    return fits


def extrapolate(sizes: list[dict], fits: dict, jobs: int, jobs_target: int) -> dict:
    out: dict = {}
    for target, hours in TARGETS_HOURS.items():
        per_stage = {}
        for stage, entry in fits.items():
            growing = entry["seconds_per_hour"] * hours
            if stage.split(":")[0] in PARALLEL_STAGES:
                growing *= jobs / jobs_target
            per_stage[stage] = round((max(entry["fixed_seconds"], 0.0) + growing) / 3600, 2)
        out[target] = {"hours_of_audio": hours, "jobs": jobs_target, "stage_hours": per_stage}
    return out


def plot(report: dict, path: Path) -> None:
    fig = Figure(figsize=(10, 4), dpi=100)
    sizes = report["sizes"]
    hours = [s["hours"] for s in sizes]
    for col, (key, label) in enumerate((("seconds", "seconds"), ("peak_rss_mb", "peak memory (MB)"))):
        ax = fig.add_subplot(1, 2, col + 1)
        for stage in sizes[0]["stages"]:
            ax.plot(hours, [s["stages"][stage][key] for s in sizes], "o-", label=stage)
        ax.set_xscale("log")
        ax.set_yscale("log" if key == "seconds" else "linear")
        ax.set_xlabel("hours of training audio")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    fig.axes[0].legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.bench scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[40, 120, 360], help="synthetic conversations per size")
    parser.add_argument(
        "--recipes", nargs="+", default=["logmel40", "logmel40_deltas", "fmllr40", "fmllr40_logmel40_deltas"]
    )
    parser.add_argument("--steps", type=int, default=20, help="training steps per size")
    parser.add_argument(
        "--frames", type=int, default=6000, help="padded frames per training step (default %(default)s)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="processes for the stages that split (synth, features)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each stage per size (default %(default)s)")
    parser.add_argument(
        "--startups",
        type=int,
        default=3,
        help="learner start-ups per size, each building the index (default %(default)s)",
    )
    parser.add_argument("--jobs-target", type=int, default=16, help="cores of the machine the extrapolation is for")
    parser.add_argument("--keep", action="store_true", help="keep the corpora and outputs")
    parser.add_argument("--out", type=Path, default=Path("exp/bench"))
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every stage (key=value)")
    args = parser.parse_args(argv)
    log_to_stderr()
    if len(args.sizes) < 2 or args.sizes != sorted(args.sizes):
        log.error("--sizes: give at least two sizes, smallest first (got %s)", args.sizes)
        return 2
    if min(args.repeats, args.startups) < 1:
        log.error("--repeats %d, --startups %d: give at least 1 run of each", args.repeats, args.startups)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-scale."))
    start = time.time()
    try:
        sizes = [SizeRun(args, work, n).run() for n in args.sizes]
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    fits = fit(sizes)
    report = {
        "benchmark": "scale",
        "settings": settings(args),
        "machine": machine(),
        "seconds": round(time.time() - start, 1),
        "sizes": sizes,
        "fits": fits,
        "extrapolation": extrapolate(sizes, fits, args.jobs, args.jobs_target),
    }
    write_report(report, args.out, "scale", plot)
    for stage, entry in fits.items():
        log.info(
            "%-32s exponent %.2f, memory %+.0f B/utterance (largest process %+.0f)",
            stage,
            entry["exponent"],
            entry["memory_bytes_per_utterance"],
            entry["largest_process_bytes_per_utterance"],
        )
    return 0 if all(math.isfinite(e["exponent"]) for e in fits.values()) else 1
