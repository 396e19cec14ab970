"""`python -m asr.bench features` at toy size: the JSON it writes and the relations between
its numbers (not their values, which are the benchmark's business)."""

import json

import pytest

from asr.bench.features import RECIPES, main

pytestmark = pytest.mark.slow


def test_benchmark_reports_every_recipe_beside_the_reference(tmp_path):
    out = tmp_path / "features.json"
    assert (
        main(
            [
                "--minutes",
                "0.4",
                "--out",
                str(out),
                # The models' smallest schedules: one iteration of each estimation (what is
                # checked is what the report holds, not how good the models are).
                "features.fmllr.num_components=8",
                "features.fmllr.min_count=100",
                "features.fmllr.mllt_iters=1",
                "features.fmllr.em_iters=1",
                "features.fmllr.fmllr_iters=1",
                "features.fmllr.fmllr_passes=2",
                "features.ivector.num_components=8",
                "features.ivector.dim=10",
                "features.ivector.min_count=1",
                "features.ivector.diag_iters=1",
                "features.ivector.full_iters=1",
                "features.ivector.em_iters=1",
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    assert report["benchmark"] == "features" and report["audio"]["data_dir"] == "synthetic"
    seconds = report["audio"]["seconds"]
    assert 20 < seconds <= 24 and report["machine"]["torch_threads"] == 1
    for entry in [report["reference_fbank"], report["fbank"], report["fbank_float32"], *report["recipes"].values()]:
        assert entry["seconds"] > 0 and entry["cpu_seconds"] > 0
        assert entry["rtf"] == pytest.approx(entry["seconds"] / seconds, rel=1e-2, abs=1e-4)  # both rounded
        assert entry["seconds_per_hour"] == pytest.approx(entry["rtf"] * 3600, rel=1e-2, abs=0.1)
    assert list(report["recipes"]) == list(RECIPES)
    assert {name: r["feat_dim"] for name, r in report["recipes"].items()} == {
        "logmel80": 80,
        "logmel40_deltas": 120,
        "fmllr40": 40,
        "fmllr40_logmel40_deltas": 160,
        "ivector100": 10,
        "fmllr40_ivector100_logmel40_deltas": 170,
    }
    for name in ("fmllr40_logmel40_deltas", "ivector100", "fmllr40_ivector100_logmel40_deltas"):
        recipe = report["recipes"][name]
        assert recipe["with_model_training"]["seconds"] == pytest.approx(
            recipe["seconds"] + recipe["model_training"]["seconds"], rel=1e-3, abs=3e-3
        )
    assert report["recipes"]["ivector100"]["speaker_ivectors"]["seconds"] > 0
    # The ratio is of the unrounded times; the reported seconds are rounded to 1 ms.
    speedup, ref, ours = (
        report["fbank_speedup_vs_reference"]["wall"],
        report["reference_fbank"]["seconds"],
        report["fbank"]["seconds"],
    )
    assert (ref - 5e-4) / (ours + 5e-4) - 0.01 <= speedup <= (ref + 5e-4) / max(ours - 5e-4, 1e-6) + 0.01
    cost, fp64, fp32 = (
        report["fbank_float64_cost"]["cpu"],
        report["fbank"]["cpu_seconds"],
        report["fbank_float32"]["cpu_seconds"],
    )
    assert (fp64 - 5e-4) / (fp32 + 5e-4) - 0.01 <= cost <= (fp64 + 5e-4) / max(fp32 - 5e-4, 1e-6) + 0.01
    # Storage: compressed sets, deltas appended by the reader (not stored).
    stored = {name: r["feats_mb_per_hour"] for name, r in report["recipes"].items()}
    assert stored["logmel40_deltas"] < 0.3 * 40 * 4 * 100 * 3600 / 2**20  # under 30% of 40 float32 per frame
    assert stored["fmllr40_logmel40_deltas"] < 0.3 * 80 * 4 * 100 * 3600 / 2**20
    compression = report["compression"]
    assert compression["bytes_per_frame"]["compressed"] < 0.3 * compression["bytes_per_frame"]["float32"]
    assert 0 < compression["static_rms_error"] < 0.05 and 0 < compression["delta_rms_error"] < 0.2
