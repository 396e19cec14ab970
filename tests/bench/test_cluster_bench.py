"""`python -m asr.bench cluster` at toy size: real torchrun learners in network namespaces
joined by rate-limited links. Checks what the report holds and how its numbers relate (their
values are the benchmark's business); skipped only where namespaces cannot be made, and in CI
(CI=true) never where they can."""

from __future__ import annotations

import json
import os

import pytest

from asr.bench import netns
from asr.bench.cluster import main

pytestmark = pytest.mark.slow


def test_cluster_benchmark_reports_hidden_communication_and_stragglers(toy_corpus, tmp_path):
    ok, why = netns.available()
    if not ok:
        if os.environ.get("CI", "").lower() == "true" and "cannot create" not in why:
            pytest.fail(why)
        pytest.skip(f"cluster benchmark: {why}")
    overrides = [
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
    out = tmp_path / "bench"
    status = main(
        [
            "--recipe-dir",
            str(tmp_path),
            "--steps",
            "4",
            "--utts",
            "2",
            "--rates",
            "20",
            "--layouts",
            "2x1",
            "--straggler-utts",
            "16",
            "--out",
            str(out),
            *overrides,
        ]
    )
    assert status == 0
    report = json.loads((out / "cluster.json").read_text())
    assert (out / "cluster.png").stat().st_size > 0
    compute = report["compute_only"]["2x1"]["step_s"]
    [link] = report["links"]
    assert link["rate_mbit"] == 20 and link["weights_transfer_s"] == pytest.approx(
        report["model_parameters"] * 32 / 20e6, rel=1e-3
    )
    for name in ("ssgd 2x1", "adpsgd 2x1"):
        run = link["runs"][name]
        assert run["compute_s"] == compute and run["step_over_compute"] == pytest.approx(
            run["step_s"] / compute, rel=1e-12
        )  # never clamped
        assert sum(run["steps_by_learner"]) >= 4
        # Every step of learner 0 sent a model's worth over host 0's link: its weights to the
        # passive partner (ADPSGD), its half of a ring all-reduce twice (SSGD).
        assert run["host0_sent_bytes"] >= run["steps_by_learner"][0] * report["weights_bytes"]
    [straggler] = report["straggler"]  # one per link rate
    assert straggler["rate_mbit"] == 20
    for algorithm, ideal in (("ssgd", 0.5), ("adpsgd", 0.75)):
        entry = straggler[algorithm]
        assert entry["ideal"] == ideal
        assert entry["ratio"] == pytest.approx(entry["slowed_utterances_per_s"] / entry["utterances_per_s"], rel=1e-12)
        assert sum(entry["steps_by_learner_slowed"]) == 8  # one epoch of 16 utterances, 2 per learner and step
