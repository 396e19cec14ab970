"""Benchmark of the GMM-HMM ladder and the WFST decoder: real-time factors, frames per second
per core and peak memory of every system's training and alignment, graph building and decoding,
and the ladder's wall time projected onto Switchboard.

    python -m asr.bench gmm [--recipe-dir recipes/mini] [--train-set train_dev] [--decode-set eval2000]
                            [--nj 1] [--out exp/bench] [hydra overrides for every stage ...]

The stages run as the recipe runs them (`python -m asr.gmm`, `python -m asr.gmm.decode`), each a
process of its own, from inside the recipe dir (its data/lang from `python -m asr.lang`, its
features, its LM), into `<out>/gmm/` there, on `--nj` jobs:
  mono_train    gmm=mono on --train-set (flat start, all passes; Kaldi's train_mono.sh)
  mono_align    gmm.kind=align: the monophones align --train-set (align_si.sh)
  tri_train     gmm=tri on those alignments (tree, all passes; train_deltas.sh)
  tri_align     the triphones align --train-set
  lda_mllt_train, lda_mllt_align   gmm=lda_mllt on the triphones' (train_lda_mllt.sh)
  sat_train, sat_align             gmm=sat on those (train_sat.sh; align_fmllr.sh)
  tri_graph     HCLG of the triphones with the 4-gram LM (mkgraph.sh)
  tri_decode    the lattice-faster decoder over --decode-set with that HCLG (decode.sh)
  sat_decode    the SAT system's two passes (decode_fmllr.sh), its graph built before
Every stage's CPU seconds are its process tree's (getrusage of the children: with other work on
the machine, the stable measure), RTF = CPU seconds / seconds of audio (the set's frames at
10 ms; for training, of the training set once, whatever the passes), frames/s per core = 100 /
RTF, peak memory the largest process's maximum resident set (wait4). tri_graph is the first
decode's time less the second's (the second finds the graph built).

`projection`: the ladder's training and alignment stages (every system, as the Switchboard
recipes run them) in hours of wall time on N cores, for SWB-300 and SWB-2000's nominal hours of
training audio, assuming each stage's CPU time grows with the audio and the jobs split it
evenly (`--nj N`). The mini sizes (a few hundred leaves) evaluate more Gaussians per frame than
s5c's (tri4: 200,000 Gaussians over 11,500 leaves, 17 a pdf against about 50 here), so the
accumulation's part is if anything overestimated; the alignment's beam search grows with the
graph, which the projection does not model. Writes `<out>/gmm.json` and `<out>/gmm.png`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from asr.bench.output import machine, settings, write_report
from asr.utils.atomic import atomic_path
from asr.utils.log import log_to_stderr

log = logging.getLogger("asr.bench.gmm")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


LAST_PEAK_MB: list[float] = [0.0]  # the last stage's peak resident memory (run_stage sets it)
TRAINING_HOURS = {"swb300": 300.0, "swb2000": 2000.0}  # nominal hours of each corpus' training audio
PROJECTED_CORES = (16, 64, 256)


def run_stage(argv: list[str], env: dict) -> tuple[float, float]:
    """(CPU, wall) seconds of one stage's process (and the jobs it waited for); its largest
    process's peak resident memory goes to LAST_PEAK_MB."""
    log.info("running %s", " ".join(argv))
    cpu, wall = children_cpu(), time.perf_counter()
    with tempfile.TemporaryFile("w+") as stderr:
        proc = subprocess.Popen([sys.executable, *argv], env=env, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        cpu, wall = children_cpu() - cpu, time.perf_counter() - wall
        if proc.returncode != 0:
            stderr.seek(0)
            raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{stderr.read()[-3000:]}")
    LAST_PEAK_MB[0] = usage.ru_maxrss / 1024.0  # Linux: kilobytes
    return cpu, wall


def audio_seconds(feats_dir: Path) -> float:
    """The set's frames at 10 ms (utt2num_frames), as the GMM stage counts audio."""
    path = feats_dir / "utt2num_frames"
    return sum(int(line.split()[1]) for line in path.read_text().splitlines() if line.strip()) / 100.0


def entry(cpu: float, wall: float, audio: float, **details) -> dict:
    return {
        "cpu_seconds": round(cpu, 2),
        "wall_seconds": round(wall, 2),
        "audio_seconds": round(audio, 1),
        "rtf": round(cpu / audio, 5),
        "frames_per_second_per_core": round(audio * 100.0 / max(cpu, 1e-9), 1),
        "peak_memory_mb": round(LAST_PEAK_MB[0], 1),
        **details,
    }


LADDER = (
    "mono_train",
    "mono_align",
    "tri_train",
    "tri_align",
    "lda_mllt_train",
    "lda_mllt_align",
    "sat_train",
    "sat_align",
)


def projection(stages: dict) -> dict:
    """Hours of wall time of the ladder's training and alignment on N cores, per corpus (see the
    module's docstring): sum of the stages' RTFs x the corpus' audio / N."""
    rtf = sum(stages[name]["rtf"] for name in LADDER if name in stages)
    return {
        "ladder_rtf": round(rtf, 5),
        "stages": [name for name in LADDER if name in stages],
        "hours": {
            corpus: {str(cores): round(rtf * hours / cores, 2) for cores in PROJECTED_CORES}
            for corpus, hours in TRAINING_HOURS.items()
        },
        "training_audio_hours": TRAINING_HOURS,
    }


def summary(directory: Path) -> dict:
    return json.loads((directory / "summary.json").read_text())


def run(args, overrides: list[str]) -> dict:
    out = Path(args.work)
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    common = [f"gmm.nj={args.nj}", *overrides]
    feats_root = Path("feats") / args.features
    train_audio = audio_seconds(feats_root / args.train_set)
    decode_audio = audio_seconds(feats_root / args.decode_set)
    mono, mono_ali, tri, tri_ali = out / "mono", out / "mono_ali", out / "tri1", out / "tri1_ali"
    stages: dict = {}
    train = [f"gmm.train_set={args.train_set}", "gmm.subset=0", "gmm.align_set=''"]
    align = ["gmm.kind=align", f"gmm.align_set={args.train_set}"]

    cpu, wall = run_stage(["-m", "asr.gmm", "gmm=mono", f"gmm.dir={mono}", *train, *common], env)
    s = summary(mono)
    stages["mono_train"] = entry(
        cpu, wall, train_audio, passes=len(s["passes"]), pdfs=s["num_pdfs"], gauss=s["num_gauss"]
    )
    cpu, wall = run_stage(
        ["-m", "asr.gmm", "gmm=mono", *align, f"gmm.alignments={mono}", f"gmm.dir={mono_ali}", *common], env
    )
    stages["mono_align"] = entry(cpu, wall, train_audio, failed=summary(mono_ali)["align_failed"])
    cpu, wall = run_stage(
        ["-m", "asr.gmm", "gmm=tri", f"gmm.dir={tri}", f"gmm.alignments={mono_ali}", *train, *common], env
    )
    s = summary(tri)
    stages["tri_train"] = entry(
        cpu, wall, train_audio, passes=len(s["passes"]), pdfs=s["num_pdfs"], gauss=s["num_gauss"]
    )
    cpu, wall = run_stage(
        ["-m", "asr.gmm", "gmm=tri", *align, f"gmm.alignments={tri}", f"gmm.dir={tri_ali}", *common], env
    )
    stages["tri_align"] = entry(cpu, wall, train_audio, failed=summary(tri_ali)["align_failed"])
    previous = tri_ali
    for kind in ("lda_mllt", "sat"):
        system, aligned = out / kind, out / f"{kind}_ali"
        cpu, wall = run_stage(
            ["-m", "asr.gmm", f"gmm={kind}", f"gmm.dir={system}", f"gmm.alignments={previous}", *train, *common], env
        )
        s = summary(system)
        stages[f"{kind}_train"] = entry(
            cpu, wall, train_audio, passes=len(s["passes"]), pdfs=s["num_pdfs"], gauss=s["num_gauss"]
        )
        cpu, wall = run_stage(
            ["-m", "asr.gmm", f"gmm={kind}", *align, f"gmm.alignments={system}", f"gmm.dir={aligned}", *common], env
        )
        stages[f"{kind}_align"] = entry(cpu, wall, train_audio, failed=summary(aligned)["align_failed"])
        previous = aligned
    decode = ["-m", "asr.gmm.decode", "gmm=tri", f"gmm.dir={tri}", f"decode.sets=[{args.decode_set}]", *common]
    first_cpu, first_wall = run_stage(decode, env)
    first_peak = LAST_PEAK_MB[0]
    shutil.rmtree(tri / f"decode_{args.decode_set}")  # else its record says it is decoded already
    cpu, wall = run_stage(decode, env)  # the graph is built: decoding alone
    graph = json.loads((tri / "graph" / "graph.json").read_text()) if (tri / "graph" / "graph.json").is_file() else {}
    decoded = entry(cpu, wall, decode_audio, utterances=len(hyp_lines(tri / f"decode_{args.decode_set}")))
    LAST_PEAK_MB[0] = first_peak
    stages["tri_graph"] = entry(first_cpu - cpu, first_wall - wall, decode_audio, **graph_size(graph))
    stages["tri_decode"] = decoded
    sat = out / "sat"
    decode = ["-m", "asr.gmm.decode", "gmm=sat", f"gmm.dir={sat}", f"decode.sets=[{args.decode_set}]", *common]
    run_stage(decode, env)
    shutil.rmtree(sat / f"decode_{args.decode_set}")
    cpu, wall = run_stage(decode, env)  # two passes, the graph built
    stages["sat_decode"] = entry(cpu, wall, decode_audio, utterances=len(hyp_lines(sat / f"decode_{args.decode_set}")))
    return stages


def graph_size(record: dict) -> dict:
    """HCLG's states and arcs (the graph's graph.json)."""
    return {k: record[k] for k in ("HCLG_states", "HCLG_arcs") if k in record}


def hyp_lines(decode_dir: Path) -> list[str]:
    return (decode_dir / "hyp.txt").read_text().splitlines()


def plot(report: dict, path: Path) -> None:
    stages = report["stages"]
    names = list(stages)
    fig = Figure(figsize=(10, 4.2), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    bars = ax.bar(names, [stages[n]["rtf"] for n in names], color="tab:blue")
    for bar, name in zip(bars, names):
        ax.annotate(
            f"{stages[name]['rtf']:.4f}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_yscale("log")
    ax.set_ylabel("CPU seconds per second of audio")
    ax.set_title(
        f"GMM-HMM stages and WFST decoding ({report['settings']['train_set']} / "
        f"{report['settings']['decode_set']}, {report['settings']['nj']} job(s))",
        fontsize=9,
    )
    ax.tick_params(axis="x", labelsize=8, labelrotation=30)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.bench gmm", description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe-dir", default="recipes/mini")
    parser.add_argument("--train-set", default="train_dev", help="trained on and aligned (default %(default)s)")
    parser.add_argument("--decode-set", default="eval2000")
    parser.add_argument("--features", default="logmel40", help="the feature set the GMMs' MFCCs come from")
    parser.add_argument("--nj", type=int, default=1, help="jobs of every stage (default %(default)s: one core)")
    parser.add_argument("--out", type=Path, default=Path("exp/bench"))
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every stage (key=value)")
    args = parser.parse_args(argv)
    log_to_stderr()
    out = args.out.resolve()
    os.chdir(args.recipe_dir)  # the stages' relative paths (data/, feats/, lang/) start there
    args.work = str(out / "gmm")
    started = time.time()
    stages = run(args, [f"features={args.features}", *args.overrides])
    report = {
        "benchmark": "gmm",
        "settings": settings(args),
        "machine": machine(),
        "seconds": round(time.time() - started, 1),
        "stages": stages,
        "projection": projection(stages),
    }
    for name, stage in stages.items():
        log.info(
            "%-11s RTF %.5f (%.1f CPU s, %.1f s wall, %.0f s of audio)",
            name,
            stage["rtf"],
            stage["cpu_seconds"],
            stage["wall_seconds"],
            stage["audio_seconds"],
        )
    for corpus, hours in report["projection"]["hours"].items():
        listed = ", ".join(f"{h} h on {cores} cores" for cores, h in hours.items())
        log.info("%s: the ladder's training and alignment projected to %s", corpus, listed)
    write_report(report, out, "gmm", plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
