"""`python -m asr.bench scale` at toy size: every stage measured at two corpus sizes through its
own entry point; the fits and extrapolation follow from the measurements."""

from __future__ import annotations

import json
import math
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from asr.bench.scale import SizeRun, main, run_measured


def test_the_largest_process_peak_is_the_kernels_high_water_mark_even_in_a_grandchild(tmp_path):
    # The grandchild touches 300 MB and frees it at once, then reports its high-water mark: a
    # sample of its resident memory falls below that mark unless taken in the microseconds
    # between the last page touched and the free.
    spike = (
        "import numpy; a = numpy.ones(300 * 2**20, numpy.uint8); del a; "
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"
    )
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {spike!r}], check=True)"
    result = run_measured([sys.executable, "-c", child], tmp_path, tmp_path / "log")
    high_water_kib = int((tmp_path / "log").read_text().split()[-1])
    assert result["largest_process_mb"] * 1024 >= high_water_kib > 300 * 1024
    assert result["peak_rss_mb"] >= result["largest_process_mb"]


def test_a_failing_command_names_its_log(tmp_path):
    with pytest.raises(RuntimeError, match="failed \\(3\\).*log"):
        run_measured([sys.executable, "-c", "raise SystemExit(3)"], tmp_path, tmp_path / "log")


# Fails when what an earlier run left is still there, as a stage that found its work done would
# measure nothing; counts its runs in a file the repeats do not remove.
FRESH_ONLY = """
import pathlib, sys
out, scratch, runs = pathlib.Path("out"), pathlib.Path("scratch"), pathlib.Path("runs")
if out.exists() or scratch.exists():
    sys.exit("found an earlier run's output")
out.mkdir(); (out / "result").write_bytes(bytes(300_000)); scratch.write_text("x")
runs.write_text(runs.read_text() + "run\\n" if runs.exists() else "run\\n")
"""


def test_each_repeat_runs_afresh_and_the_fastest_and_smallest_are_reported(tmp_path):
    args = SimpleNamespace(repeats=3, jobs=1, overrides=[])
    size = SizeRun(args, tmp_path, 1)
    stage = size.stage("fresh", [sys.executable, "-c", FRESH_ONLY], outputs=("out",), fresh=("scratch",))
    assert (size.dir / "runs").read_text().splitlines() == ["run"] * 3
    for key in ("seconds", "peak_rss_mb", "largest_process_mb"):
        assert len(stage[f"{key}_runs"]) == 3 and stage[key] == min(stage[f"{key}_runs"])
    assert stage["disk_mb"] == pytest.approx(300_000 / 2**20, rel=0.1)  # the last run's output, kept


# One run per stage and size (--repeats 1): the repeats' bookkeeping is the test above's, and a
# second run of every real stage would double this test's time.
@pytest.mark.slow
def test_scale_benchmark_measures_every_stage_and_fits_its_growth(tmp_path):
    out = tmp_path / "bench"
    status = main(
        [
            "--sizes",
            "2",
            "4",
            "--recipes",
            "logmel40",
            "--steps",
            "2",
            "--frames",
            "1200",
            "--jobs",
            "1",
            "--repeats",
            "1",
            "--startups",
            "2",
            "--out",
            str(out),
            "synth=tiny",
            "data.dev_utts=8",
            "model.num_layers=1",
            "model.hidden_size=16",
        ]
    )
    assert status == 0
    report = json.loads((out / "scale.json").read_text())
    assert (out / "scale.png").stat().st_size > 0
    small, large = report["sizes"]
    assert (small["conversations"], large["conversations"]) == (2, 4) and large["hours"] > small["hours"] > 0
    stages = ["synth", "prepare", "validate", "features:logmel40", "tokenizer", "lm", "train"]
    assert list(small["stages"]) == stages
    for size in (small, large):
        for name, stage in size["stages"].items():
            assert (
                stage["seconds"] > 0 and stage["peak_rss_mb"] >= stage["largest_process_mb"] > 10
            )  # a Python process at least
            assert stage["seconds_per_hour"] == pytest.approx(stage["seconds"] / size["hours"])
            for key in ("seconds", "peak_rss_mb", "largest_process_mb"):
                assert stage[f"{key}_runs"] == [stage[key]]
        assert size["stages"]["features:logmel40"]["disk_mb"] > 0 and size["stages"]["train"]["startup_seconds"] > 0
        train = size["stages"]["train"]
        assert train["startup_peak_rss_mb"] > 10  # the learner's peak memory at its first batch
        assert len(train["startup_seconds_runs"]) == 2 and train["startup_seconds"] == min(
            train["startup_seconds_runs"]
        )
        assert train["startup_peak_rss_mb"] == max(train["startup_peak_rss_mb_runs"])
        assert (
            0
            < train["startup_datasets_seconds"]
            == min(train["startup_datasets_seconds_runs"])
            < train["startup_seconds"]
        )
    for name in stages:
        fit = report["fits"][name]
        small_stage, large_stage = small["stages"][name], large["stages"][name]
        expected = math.log(large_stage["seconds"] / small_stage["seconds"]) / math.log(large["hours"] / small["hours"])
        assert fit["exponent"] == pytest.approx(expected, rel=1e-6) and fit["marginal_exponent"] == pytest.approx(
            expected, rel=1e-6
        )
        # two sizes: the line through both
        per_hour = (large_stage["seconds"] - small_stage["seconds"]) / (large["hours"] - small["hours"])
        assert fit["seconds_per_hour"] == pytest.approx(max(per_hour, 0.0), rel=1e-6, abs=1e-9)
        assert fit["fixed_seconds"] == pytest.approx(
            small_stage["seconds"] - per_hour * small["hours"], rel=1e-6, abs=1e-6
        )
        slope = (
            (large_stage["peak_rss_mb"] - small_stage["peak_rss_mb"])
            * 2**20
            / (large["utterances"] - small["utterances"])
        )
        assert fit["memory_bytes_per_utterance"] == pytest.approx(slope, rel=1e-6, abs=1e-6)
        assert fit["marginal_memory_bytes_per_utterance"] == pytest.approx(slope, rel=1e-6, abs=1e-6)
        slope = (
            (large_stage["largest_process_mb"] - small_stage["largest_process_mb"])
            * 2**20
            / (large["utterances"] - small["utterances"])
        )
        assert fit["largest_process_bytes_per_utterance"] == pytest.approx(slope, rel=1e-6, abs=1e-6)
    train = [size["stages"]["train"] for size in (small, large)]
    slope = (
        (train[1]["startup_peak_rss_mb"] - train[0]["startup_peak_rss_mb"])
        * 2**20
        / (large["utterances"] - small["utterances"])
    )
    assert report["fits"]["train"]["startup_memory_bytes_per_utterance"] == pytest.approx(slope, rel=1e-6, abs=1e-6)
    swb = report["extrapolation"]["swb2000"]
    fit = report["fits"]["prepare"]  # linear: the fixed cost plus the cost per hour, not split over jobs
    assert swb["stage_hours"]["prepare"] == pytest.approx(
        (max(fit["fixed_seconds"], 0) + fit["seconds_per_hour"] * 2000) / 3600, abs=0.01
    )
    fit = report["fits"]["features:logmel40"]  # split over jobs: the per-hour part on --jobs-target cores
    assert swb["stage_hours"]["features:logmel40"] == pytest.approx(
        (
            max(fit["fixed_seconds"], 0)
            + fit["seconds_per_hour"] * 2000 * report["settings"]["jobs"] / report["settings"]["jobs_target"]
        )
        / 3600,
        abs=0.01,
    )
    assert np.isfinite(swb["stage_hours"]["features:logmel40"])
