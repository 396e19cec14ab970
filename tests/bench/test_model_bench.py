"""`python -m asr.bench model` and `make gpu-check`'s CPU half (scripts/gpu_check.py --device
cpu) at toy size: the JSON they write and the relations between its numbers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from asr.bench.model_step import PAPER_FRAMES_PER_S_PER_V100, main
from tests.recipes.conftest import REPO

pytestmark = pytest.mark.slow

TOY = ["--pdfs", "50", "--batch-samples", "4", "--steps", "2", "--warmup", "1", "--device", "cpu", "--threads", "1"]


def test_the_presets_model_step_in_frames_per_second(tmp_path):
    assert main([*TOY, "--precisions", "fp32,fp16", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "model.json").read_text())
    assert (tmp_path / "model.png").stat().st_size > 0
    model = report["model"]
    assert (model["layers"], model["hidden"], model["bottleneck"], model["input_dim"]) == (6, 512, 256, 260)
    fp32, fp16 = report["runs"]
    assert fp32["precision"] == "fp32" and len(fp32["step_seconds"]) == 2
    assert fp32["frames_per_second"] == pytest.approx(4 * 21 / fp32["step_seconds_median"], rel=0.01, abs=0.1)
    assert "needs a CUDA device" in fp16["skipped"]  # refused as train.precision refuses it
    assert report["paper_frames_per_second_per_v100"] == round(PAPER_FRAMES_PER_S_PER_V100) == 9615


def test_a_preset_on_whole_utterances_is_refused(tmp_path):
    assert main([*TOY, "--experiment", "swb300_ssgd", "--out", str(tmp_path)]) == 2
    assert not (tmp_path / "model.json").exists()


def test_the_gpu_checks_cpu_half_writes_one_json(tmp_path):
    bench = " ".join(TOY[:-4] + ["--precisions", "fp32"])
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/gpu_check.py",
            "--device",
            "cpu",
            "--skip-tests",
            "--out",
            str(tmp_path),
            "--bench-args",
            bench,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["ok"] and report["device"] == "cpu" and report["tests"] is None
    assert report["versions"]["torch"] and report["throughput"]["runs"][0]["frames_per_second"] > 0


def test_the_gpu_check_reads_every_tests_outcome(tmp_path):
    sys.path.insert(0, str(REPO / "scripts"))
    from gpu_check import test_outcomes

    junit = tmp_path / "tests.xml"
    junit.write_text(
        '<testsuites><testsuite><testcase classname="a" name="ok" time="1.234">'
        "<system-out>largest weight difference 2e-05\nsecond line\n</system-out></testcase>"
        '<testcase classname="a" name="bad"><failure message="x"/></testcase>'
        '<testcase classname="a" name="gone"><skipped message="needs a GPU"/></testcase></testsuite></testsuites>'
    )
    outcomes = test_outcomes(junit)
    assert (outcomes["passed"], outcomes["failed"], outcomes["skipped"]) == (1, 1, 1)
    assert outcomes["not_passed"] == ["a::bad", "a::gone (skipped: needs a GPU)"]
    assert outcomes["seconds"]["a::ok"] == 1.23
    assert outcomes["printed"] == {"a::ok": ["largest weight difference 2e-05", "second line"]}
