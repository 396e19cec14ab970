"""The batch-size sweep on the toy corpus: one simulated run per (algorithm, global batch),
results in JSON, a table and a plot, and a re-run that trains nothing again."""

import json

import pytest
import torch

from asr.sweep.report import write_report
from asr.sweep.run import run_sweep, sweep_lr
from asr.utils.errors import InputError
from tests.fixtures.toy_corpus import make_toy_experiment, toy_config

torch.set_num_threads(1)
SWEEP = ["sweep.learners=4", "sweep.global_batches=[4,8]", "sweep.epochs=2", "sweep.reference_batch=4", "train.optimizer=sgd",
         "train.lr=0.02", "train.warmup_steps=2", "sweep.algorithms=[ssgd,adpsgd]"]


@pytest.fixture
def root(tmp_path):
    make_toy_experiment(tmp_path)
    return tmp_path


def test_sweep_writes_a_row_per_run_a_table_and_a_plot_and_resumes(root, caplog):
    cfg = toy_config(root, SWEEP)
    results = run_sweep(cfg)
    assert [(r["algorithm"], r["global_batch"]) for r in results] == [("ssgd", 4), ("ssgd", 8), ("adpsgd", 4), ("adpsgd", 8)]
    for r in results:
        steps_per_epoch = 40 // r["global_batch"]  # 40 training utterances, every batch full
        assert r["steps"] == 2 * steps_per_epoch and r["per_learner_batch"] == r["global_batch"] // 4
        assert r["lr"] == pytest.approx(0.02 * r["global_batch"] / 4)  # linear scaling
        assert [e["epoch"] for e in r["epochs_log"]] == [1, 2]
        assert r["epochs_log"][1]["held_out_loss"] < r["epochs_log"][0]["held_out_loss"]  # learning
    spreads = {r["algorithm"]: r["epochs_log"][-1]["spread"] for r in results}
    assert spreads["ssgd"] < 1e-6 < spreads["adpsgd"]  # SSGD learners are one model; ADPSGD's differ

    out = Path(cfg.sweep.out_dir)
    write_report(results, out)
    table = (out / "sweep.md").read_text().splitlines()
    assert table[0].startswith("| global batch | per learner | ssgd held-out loss | adpsgd held-out loss")
    assert table[2].startswith("| 4 | 1 |") and table[3].startswith("| 8 | 2 |")
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "sweep.json").read_text()) == json.loads(json.dumps(results))

    with caplog.at_level("INFO"):
        again = run_sweep(cfg)
    assert again == json.loads(json.dumps(results)) and caplog.text.count("done already") == 4


def test_bad_sweep_settings_are_named(root):
    with pytest.raises(InputError, match="6 is not a multiple of sweep.learners=4"):
        run_sweep(toy_config(root, SWEEP + ["sweep.global_batches=[6]"]))
    with pytest.raises(InputError, match="sweep.lr_scaling='cubic'"):
        sweep_lr(toy_config(root, SWEEP + ["sweep.lr_scaling=cubic"]), 8)
