"""`python -m asr.bench chunks` at toy size: the JSON and PNG it writes and the relations between
its numbers (not their values, which are the benchmark's business)."""

import json

import pytest

from asr.bench.chunks import main

pytestmark = pytest.mark.slow


def test_benchmark_reports_the_loader_beside_the_training_step(tmp_path):
    assert (
        main(
            [
                "--utts",
                "12",
                "--seconds",
                "0.2",
                "--batch-samples",
                "8",
                "--steps",
                "1",
                "--pdfs",
                "20",
                "--device",
                "cpu",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    report = json.loads((tmp_path / "chunks.json").read_text())
    assert report["benchmark"] == "chunks" and (tmp_path / "chunks.png").stat().st_size > 0
    assert report["set"]["feat_dim"] == 260 and report["set"]["samples"] <= report["set"]["frames"] // 21
    for name in ("loader", "rows_alone", "whole_utterance"):
        entry = report[name]
        assert (
            entry["batches"] >= 2 and 8 * (entry["batches"] - 1) < entry["samples"] <= 8 * entry["batches"]
        )  # an epoch at most
        assert entry["samples_per_second"] == pytest.approx(entry["samples"] / entry["seconds"], rel=0.02, abs=0.05)
    step = report["step"]
    # Rates are rounded to 0.1 (abs=0.05): a step of 4 s on a slow or busy CPU is 1.9 for 1.94.
    assert step["device"] == "cpu" and step["samples_per_second"] == pytest.approx(
        8 / step["step_seconds_median"], rel=0.02, abs=0.05
    )
    assert report["loader_over_step"] == pytest.approx(
        report["loader"]["samples_per_second"] / step["samples_per_second"], rel=0.02, abs=0.005
    )
