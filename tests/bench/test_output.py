"""asr/bench/output.py: a benchmark's report as JSON and PNG, with its options and machine."""

import argparse
import json
from pathlib import Path

from asr.bench.output import machine, settings, write_report


def test_settings_keep_the_options_and_write_paths_as_strings():
    args = argparse.Namespace(out=Path("exp/bench"), repeats=3, overrides=["a=1"])
    assert settings(args) == {"out": "exp/bench", "repeats": 3, "overrides": ["a=1"]}


def test_machine_names_the_cores_and_takes_extra_fields():
    info = machine(torch_threads=1)
    assert info["cpus"] >= 1 and info["torch_threads"] == 1 and {"platform", "python"} <= info.keys()


def test_report_written_as_json_beside_its_plot(tmp_path):
    drawn = []

    def plot(report, path):
        drawn.append(report["benchmark"])
        path.write_bytes(b"png")

    out = tmp_path / "new" / "dir"
    paths = write_report({"benchmark": "toy", "seconds": 1.5}, out, "toy", plot)
    assert paths == (out / "toy.json", out / "toy.png")
    assert json.loads((out / "toy.json").read_text()) == {"benchmark": "toy", "seconds": 1.5}
    assert drawn == ["toy"] and (out / "toy.png").read_bytes() == b"png"
    assert sorted(p.name for p in out.iterdir()) == ["toy.json", "toy.png"]  # no temporary left behind
