"""`python -m asr.bench distributed` at toy size: the JSON it writes and the relations between
its numbers (not their values, which are the benchmark's business)."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_benchmark_writes_step_times_hidden_ratio_straggler_and_scaling(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "asr.bench", "distributed", "--processes", "1", "2", "--algorithms", "ssgd", "adpsgd",
           "--straggler-processes", "2", "--steps", "3", "--warmup", "1", "--layers", "1", "--hidden", "16", "--batch", "2",
           "--frames", "30", "--feat-dim", "8", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["benchmark"] == "distributed" and report["settings"]["steps"] == 3
    results = report["results"]
    assert set(results["compute_only"]) == {"1", "2"}
    assert all(r["empty_step_s"] < r["step_s"] for r in results["compute_only"].values())
    for algorithm in ("ssgd", "adpsgd"):
        row = results["algorithms"][algorithm]["2"]
        assert 0.0 <= row["hidden_ratio"] <= 1.0 and row["comm_s"] > 0 and row["step_s"] > 0
        assert row["exposed_comm_s"] == pytest.approx(max(0.0, row["step_s"] - row["compute_s"]))
        assert row["straggler_ratio"] == pytest.approx(row["straggler_samples_per_s"] / row["samples_per_s"])
