"""The cluster benchmark's report (asr/bench/cluster_report.py) and its run plan, without runs:
the delay-by-one runs beside ADPSGD / H-ADPSGD, and paired reports with the link probe, drawn again
from committed reports."""

from __future__ import annotations

from pathlib import Path

from asr.bench.cluster import link_runs
from asr.bench.cluster_report import DELAYED, load, markdown, write_outputs

COMMITTED = Path(__file__).parents[2] / "docs/img/cluster_mini_hadpsgd_delay.json"


def test_delay_by_one_runs_only_the_decentralized_algorithm_once_more():
    plain = link_runs(["ssgd", "hadpsgd"], fastest_link=False)
    delayed = link_runs(["ssgd", "hadpsgd"], fastest_link=False, delay_by_one=True)
    assert plain == {"ssgd": ("ssgd",), "hadpsgd": ("hadpsgd",)}
    assert delayed == plain | {"hadpsgd" + DELAYED: ("hadpsgd", "distributed.delay_by_one=true")}
    assert link_runs(["ssgd"], fastest_link=True, delay_by_one=True).keys() == {"ssgd", "ssgd_25mb_buckets"}


def test_the_committed_report_shows_delay_by_one_beside_the_plain_run(tmp_path):
    report = load(COMMITTED)
    rows = [line for line in markdown(report).splitlines() if line.startswith("| 2x2")]
    assert len(rows) == 2  # the fast and the one-step link
    for row, link in zip(rows, report["points"][0]["links"]):
        cells = [c.strip() for c in row.strip("|").split("|")]
        delayed = link["runs"]["hadpsgd" + DELAYED]["step_over_compute"]["mean"]
        assert cells[9].startswith(f"{delayed:.2f}x")
        assert cells[6].startswith(f"H-ADPSGD {link['runs']['hadpsgd']['step_over_compute']['mean']:.2f}x")
    png, md = write_outputs(report, tmp_path / "cluster.json")
    assert png.stat().st_size > 10_000 and "delay by one" in md.read_text()


def test_a_paired_report_shows_each_links_own_compute_only_step_and_the_probe():
    report = load(Path(__file__).parents[2] / "docs/img/cluster_mini_paper_cpu.json")
    table = markdown(report)
    assert table.startswith("Step time over the compute-only step measured just before it")
    rows = [line for line in table.splitlines() if line.startswith("| 2x")]
    links = [link for point in report["points"] for link in point["links"]]
    assert len(rows) == len(links) == 4
    for row, link in zip(rows, links):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[3].startswith(f"{link['compute_only']['step_s']['mean']:.3f} s")  # the link's, not the point's
        alone = f"an exchange alone {link['exchange_s']['mean']:.3g} s and {link['exchange_cpu_s']:.2g} CPU-s"
        assert alone in cells[2]
        assert ("the nodes' collectives" in cells[2]) == cells[0].endswith("x2")
