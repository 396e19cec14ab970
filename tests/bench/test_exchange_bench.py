"""`python -m asr.bench exchange` at toy size (two gloo processes): the JSON and PNG it writes,
and that an exchange after the first few takes no fresh model-sized memory on either side
(before the buffers were made once: 3 model sizes a step on the active side, 5 on the passive)."""

import json

import pytest

from asr.bench.exchange import main, plot

pytestmark = pytest.mark.slow


def test_benchmark_counts_cpu_time_and_fresh_memory_of_both_sides(tmp_path):
    assert main(["--models", "toy", "--exchanges", "4", "--warmup", "2", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "exchange.json").read_text())
    assert report["benchmark"] == "exchange" and (tmp_path / "exchange.png").stat().st_size > 0
    toy = report["models"]["toy"]
    assert toy["parameters"] > 400_000  # 2 MB of weights: each new buffer of them is mapped afresh
    for side in (toy["active"], toy["passive"], toy["transport"]["active"], toy["transport"]["passive"]):
        assert side["cpu_ms"] >= side["main_cpu_ms"] >= 0 and side["wall_ms"] > 0
        assert side["buffers"] < 0.5, toy  # no new model-sized tensor per exchange
        assert side["fresh_mb"] == pytest.approx(side["buffers"] * toy["parameters"] * 4 / 1e6, abs=0.02)
    report["compare"] = {"label": "again", "models": report["models"]}
    plot(report, tmp_path / "compared.png")  # an earlier run drawn beside
    assert (tmp_path / "compared.png").stat().st_size > 0
