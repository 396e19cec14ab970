"""`python -m asr.bench sweep_nodes` at toy size: every point of the grid for each decentralized
algorithm, timed batched and alone, and the two runs' losses compared (the figures are the
benchmark's business; docs/sweep.md has them)."""

import json

from tests.sweep.test_sweep_samples import SWEEP, root  # noqa: F401 (the module fixture)

from asr.bench.sweep_nodes import main
from tests.fixtures.hybrid_corpus import hybrid_overrides


def test_every_decentralized_point_is_timed_both_ways_with_its_loss_difference(
    root,  # noqa: F811
    tmp_path,
    sweep_start_in_this_process,
):
    out = tmp_path / "bench"
    overrides = hybrid_overrides(root, [*SWEEP, "sweep.algorithms=[ssgd,adpsgd,hadpsgd]", "sweep.baseline_lrs=[0.1]"])
    assert main(["--epochs", "1", "--repeats", "2", "--out", str(out), *overrides]) == 0
    report = json.loads((out / "sweep_nodes.json").read_text())
    assert (out / "sweep_nodes.png").stat().st_size > 0
    # SSGD has one node: nothing to batch
    assert [(p["algorithm"], p["global_batch"]) for p in report["points"]] == [
        (a, b) for a in ("adpsgd", "hadpsgd") for b in (8, 16)
    ]
    for point in report["points"]:
        assert len(point["seconds_batched"]) == len(point["seconds_alone"]) == 2
        assert point["per_learner_batch"] == point["global_batch"] // 4
        assert 0 <= point["held_out_relative_difference"] < 1e-3  # the same training, to round-off
    assert report["learners"] == 4 and report["train_samples"] > 0
