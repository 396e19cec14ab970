"""`python -m asr.bench cluster` at toy size: real torchrun learners in network namespaces
joined by rate-limited links. Checks what the report holds and how its numbers relate (their
values are the benchmark's business); skipped only where namespaces cannot be made, and in CI
(CI=true) never where they can. The option parsing and the tables are checked without runs."""

from __future__ import annotations

import json
import os

import pytest

from asr.bench import netns
from asr.bench.cluster import frames_plan, link_rates, main
from asr.bench.cluster_report import DEFAULT_BUCKETS_RUN, markdown, run_summary, straggler_summary
from asr.utils.errors import InputError

STEPS, UTTS, STRAGGLER_UTTS = 3, 2, 8


def needs_namespaces():
    ok, why = netns.available()
    if not ok:
        if os.environ.get("CI", "").lower() == "true" and "cannot create" not in why:
            pytest.fail(why)
        pytest.skip(f"cluster benchmark: {why}")


def toy_overrides(toy_corpus) -> list[str]:
    return [
        f"data.data_dir={toy_corpus / 'data'}",
        "data.train_set=train",
        "data.dev_set=dev",
        f"features.feats_dir={toy_corpus / 'feats'}",
        "features.name=toy",
        f"tokenizer.lang_dir={toy_corpus / 'lang'}",
        "tokenizer=bpe300",
        "tokenizer.vocab_size=40",
        "model.num_layers=1",
        "model.hidden_size=24",
        "model.stack_frames=2",
        "model.subsample=2",
        "train.lr=0.01",
        "train.warmup_steps=2",
        "train.final_lr=0.0",
    ]


def bench(tmp_path, toy_corpus, *options: str) -> dict:
    out = tmp_path / "bench"
    common = ["--recipe-dir", str(tmp_path), "--steps", str(STEPS), "--utts", str(UTTS), "--out", str(out)]
    assert main([*common, *options, *toy_overrides(toy_corpus)]) == 0
    assert (out / "cluster.png").stat().st_size > 0
    return json.loads((out / "cluster.json").read_text())


def test_frames_default_to_the_papers_steps_per_layout():
    assert frames_plan([], ["2x1", "2x2"], sweep=False) == {"2x1": [4032], "2x2": [2688]}
    assert frames_plan(["6000", "2x2:2688"], ["2x1", "2x2"], sweep=False) == {"2x1": [6000], "2x2": [6000, 2688]}
    assert frames_plan(["2x1:6000"], ["2x1", "2x2"], sweep=True) == {
        "2x1": [6000, 2688, 4032, 12000],  # the given size first: the straggler runs at it
        "2x2": [2688, 4032, 6000, 12000],
    }
    for wrong in (["3x1:4032"], ["2x1:many"], ["0"]):
        with pytest.raises(InputError, match="--frames"):
            frames_plan(wrong, ["2x1", "2x2"], sweep=False)


def test_auto_links_cost_one_step_of_the_point_and_a_tenth_of_it():
    (fast_name, fast), (slow_name, slow) = link_rates(["auto"], params=1_000_000, compute_s=0.5)
    assert (fast_name, slow_name) == ("fast", "one_step")
    assert slow == pytest.approx(64.0) and fast == pytest.approx(640.0)  # 32 Mbit in 0.5 s, and 10x
    assert link_rates(["20", "0", "20"], params=1, compute_s=1.0) == [("given", 20.0), ("given", 0.0)]


def check_run(run: dict, compute_s: list[float], repeats: int, learners: int, roles: set[str]) -> None:
    for stats in (run["step_s"], run["step_over_compute"]):
        assert len(stats["repeats"]) == repeats and stats["min"] <= stats["mean"] <= stats["max"]
    over = [s / c for s, c in zip(run["step_s"]["repeats"], compute_s, strict=True)]  # each over its repeat's
    assert run["step_over_compute"]["repeats"] == pytest.approx(over)
    assert set(run["by_role"]) == roles and len(run["roles"]) == learners
    for role in run["by_role"].values():  # the roles' means bracket the mean over all learners
        assert len(role["step_s"]["repeats"]) == repeats
    low = [min(r["step_s"]["repeats"][i] for r in run["by_role"].values()) for i in range(repeats)]
    high = [max(r["step_s"]["repeats"][i] for r in run["by_role"].values()) for i in range(repeats)]
    for i, step in enumerate(run["step_s"]["repeats"]):
        assert low[i] - 1e-9 <= step <= high[i] + 1e-9
    assert len(run["steps_by_learner"]) == repeats and all(sum(s) >= STEPS for s in run["steps_by_learner"])


def learner(role, step_s, utterances=0, train_s=1.0, steps=3):
    return {
        "role": role,
        "step_seconds_mean": step_s,
        "utterances": utterances,
        "train_seconds": train_s,
        "steps": steps,
    }


def test_repeats_are_summarised_per_role_and_paired_for_the_straggler():
    roles = ("active", "active", "passive", "passive")
    first = [learner(r, s) for r, s in zip(roles, (1.0, 1.2, 2.0, 2.2))]
    second = [learner(r, s) for r, s in zip(roles, (1.4, 1.6, 3.0, 3.2))]
    run = run_summary([(first, 100), (second, 200)], compute_s=[1.0, 2.0])
    assert run["step_s"]["repeats"] == pytest.approx([1.6, 2.3])
    assert (run["step_s"]["min"], run["step_s"]["max"]) == pytest.approx((1.6, 2.3))
    assert run["step_s"]["mean"] == pytest.approx(1.95)
    assert run["step_over_compute"]["repeats"] == pytest.approx([1.6, 1.15])  # each over its own repeat's
    assert run["by_role"]["active"]["step_s"]["repeats"] == pytest.approx([1.1, 1.5])
    assert run["by_role"]["passive"]["step_over_compute"]["repeats"] == pytest.approx([2.1, 1.55])
    assert run["roles"] == list(roles) and run["host0_sent_bytes"] == [100, 200]
    even = [learner("active", 1, utterances=60, train_s=2.0), learner("passive", 1, utterances=60, train_s=3.0)]
    slowed = [learner("active", 1, utterances=80, train_s=4.0), learner("passive", 1, utterances=40, train_s=4.0)]
    faster = [learner("active", 1, utterances=60, train_s=1.0), learner("passive", 1, utterances=60, train_s=2.0)]
    entry = straggler_summary([(even, slowed), (faster, slowed)], ideal=0.75)
    assert entry["utterances_per_s"]["repeats"] == pytest.approx([40.0, 60.0])
    assert entry["ratio"]["repeats"] == pytest.approx([30 / 40, 30 / 60])  # each repeat over its own even run
    assert entry["ratio"]["mean"] == pytest.approx(0.625) and entry["ideal"] == 0.75


@pytest.mark.slow
@pytest.mark.usefixtures("warm_processes")
def test_repeats_roles_and_the_h_adpsgd_straggler(toy_corpus, tmp_path):
    """H-ADPSGD on 2 hosts x 2 at one given link: active and passive learners apart, the
    straggler epochs with one host at half speed. One repeat: 4 learners a job make each run
    costly; how repeats are summarised is checked without runs below."""
    needs_namespaces()
    report = bench(
        tmp_path, toy_corpus, *("--layouts", "2x2", "--rates", "20", "--repeats", "1"),
        *("--algorithms", "decentralized", "--straggler-utts", str(STRAGGLER_UTTS)),
    )  # fmt: skip
    [point] = report["points"]
    assert (point["layout"], point["frames"], point["paper_step"], point["algorithm"]) == ("2x2", 2688, True, "hadpsgd")
    [link] = point["links"]
    compute = link["compute_only"]["step_s"]  # the repeat's own, measured before its runs
    assert len(compute["repeats"]) == 1 and compute["min"] == compute["mean"] == compute["max"]
    # a given rate needs no calibrating run: the point's compute-only steps are the repeats' alone
    assert point["calibration_step_s"] is None and point["compute_only"]["step_s"]["repeats"] == compute["repeats"]
    assert link["rate_mbit"] == 20 and link["weights_transfer_s"] == pytest.approx(
        report["model_parameters"] * 32 / 20e6, rel=1e-9
    )
    exchange = link["exchange_s"]  # timed alone on the link: the probe's rounds, its warm-up left out
    assert len(exchange["repeats"]) == 10 and exchange["min"] > 0
    # the machine's CPU time over the probe's rounds (/proc/stat), per exchange and per step of
    # the nodes' all-reduce and all-gather (2 learners a node)
    assert link["exchange_cpu_s"] >= 0 and link["node_step_cpu_s"] >= 0
    assert set(link["runs"]) == {"hadpsgd"}
    run = link["runs"]["hadpsgd"]
    check_run(run, compute["repeats"], 1, 4, {"active", "passive"})
    assert run["roles"] == ["active", "active", "passive", "passive"]  # node 0 starts the exchanges
    # Every step of node 0 sent a model's worth over host 0's link: each learner its share of
    # the weights to its counterpart on the passive node.
    for steps, sent in zip(run["steps_by_learner"], run["host0_sent_bytes"]):
        assert sent >= steps[0] * report["weights_bytes"]
    [entry] = report["straggler"]
    assert (entry["layout"], entry["frames"], entry["algorithms"]) == ("2x2", 2688, ["hadpsgd"])
    straggler = entry["hadpsgd"]
    assert straggler["ideal"] == 0.75 and straggler["roles"] == run["roles"]
    even, slowed = straggler["utterances_per_s"]["repeats"], straggler["slowed_utterances_per_s"]["repeats"]
    assert straggler["ratio"]["repeats"] == pytest.approx([s / e for s, e in zip(slowed, even)])
    for steps in straggler["steps_by_learner_slowed"]:  # one epoch: every utterance once, UTTS per step
        assert sum(steps) * UTTS == STRAGGLER_UTTS
    table = markdown(report)
    assert "| 2x2 | 2,688 (paper) |" in table and "H-ADPSGD" in table
    assert f"an exchange alone {exchange['mean']:.3g} s and {link['exchange_cpu_s']:.2g} CPU-s" in table
    assert table.startswith("Step time over the compute-only step measured just before it")


@pytest.mark.slow
@pytest.mark.usefixtures("warm_processes")
def test_links_per_step_size_ssgd_buckets_and_replot(toy_corpus, tmp_path):
    """SSGD at a given step size of one layout, at its own one-step link and ten times it,
    beside itself with torch's 25 MB buckets at the fast link; the figure and the tables drawn
    again from the json alone. One step size: each size is a point with runs of its own, and
    how sizes become points is test_frames_default_to_the_papers_steps_per_layout's."""
    needs_namespaces()
    report = bench(
        tmp_path, toy_corpus, *("--layouts", "2x1", "--frames", "3000", "--repeats", "1"),
        *("--algorithms", "ssgd", "--straggler-utts", "0", "--exchange-rounds", "0"),
    )  # fmt: skip
    assert [p["frames"] for p in report["points"]] == [3000] and report["straggler"] == []
    assert report["ssgd_bucket_cap_mb"] == 1.0  # auto, on a model far under 4 MB
    for point in report["points"]:
        fast, one_step = point["links"]
        assert (fast["link"], one_step["link"]) == ("fast", "one_step")
        # one step of this point, as its calibrating compute-only run measured it
        assert one_step["weights_transfer_s"] == pytest.approx(point["calibration_step_s"], rel=1e-9)
        paired = [step for link in point["links"] for step in link["compute_only"]["step_s"]["repeats"]]
        assert point["compute_only"]["step_s"]["repeats"] == [point["calibration_step_s"], *paired]
        assert fast["rate_mbit"] == pytest.approx(10 * one_step["rate_mbit"], rel=1e-9)
        assert set(fast["runs"]) == {"ssgd", DEFAULT_BUCKETS_RUN} and set(one_step["runs"]) == {"ssgd"}
        assert "exchange_s" not in fast  # --exchange-rounds 0: no exchange timed alone
        for link in point["links"]:
            for run in link["runs"].values():
                check_run(run, link["compute_only"]["step_s"]["repeats"], 1, 2, {"all"})
                # its half of a ring all-reduce, twice, every step: a model's worth
                assert run["host0_sent_bytes"][0] >= run["steps_by_learner"][0][0] * report["weights_bytes"]
    json_path = tmp_path / "bench" / "cluster.json"
    written = (tmp_path / "bench" / "cluster.md").read_text()
    for drawn in ("cluster.png", "cluster.md"):
        (tmp_path / "bench" / drawn).unlink()
    assert main(["--replot", str(json_path)]) == 0
    assert (tmp_path / "bench" / "cluster.png").stat().st_size > 0
    assert (tmp_path / "bench" / "cluster.md").read_text() == written == markdown(report)


def test_replot_refuses_a_report_of_another_format(tmp_path, capsys):
    old = tmp_path / "cluster.json"
    old.write_text(json.dumps({"benchmark": "cluster", "links": []}))
    assert main(["--replot", str(old)]) == 2
    assert "rerun `python -m asr.bench cluster`" in capsys.readouterr().err
    assert not (tmp_path / "cluster.png").exists()


def test_a_negative_number_of_timed_exchanges_is_refused(tmp_path, capsys):
    assert main(["--exchange-rounds", "-1", "--out", str(tmp_path / "bench")]) == 2
    assert "--exchange-rounds: 0 or more" in capsys.readouterr().err
    assert not (tmp_path / "bench").exists()
