"""Checkpoints: exact round trip, rotation, corrupt-file fallback, decode's names."""

import random

import numpy as np
import pytest
import torch

from asr.models.blstm import build_model
from asr.models.checkpoint import (
    CHECKPOINT_FORMAT,
    CheckpointDir,
    CorruptCheckpoint,
    load_checkpoint,
    model_from_checkpoint,
    restore_rng_state,
    rng_state,
    save_checkpoint,
)
from asr.models.config import ModelConfig
from asr.optim.schedule import LrSchedule
from asr.optim.updater import Updater
from asr.utils.errors import InputError

torch.set_num_threads(1)
MODEL_CFG = ModelConfig(num_layers=1, hidden_size=4, stack_frames=1, subsample=1)


def trained_state(step=7, seed=0):
    torch.manual_seed(seed)
    model = build_model(MODEL_CFG, 3, 5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    up = Updater(model, opt, LrSchedule(opt, 0.01, warmup_steps=10))
    for _ in range(2):
        log_probs, _ = model(torch.randn(2, 6, 3), torch.tensor([6, 4]))
        up.step(-log_probs[..., 1].mean())
    return (
        model,
        up,
        {
            "format": CHECKPOINT_FORMAT,
            "model": model.state_dict(),
            "model_info": {"config": vars(MODEL_CFG), "input_dim": 3, "num_outputs": 5},
            "updater": up.state_dict(),
            "sampler": {"epoch": 1, "batches_done": 4},
            "rng": rng_state(),
            "step": step,
            "epoch": 1,
            "progress": {"step": step},
            "config": {"seed": 1},
        },
    )


def test_round_trip_restores_weights_optimizer_and_rng(tmp_path):
    model, up, state = trained_state()
    random.seed(5)
    np.random.seed(6)
    torch.manual_seed(7)
    state["rng"] = rng_state()
    expected = (random.random(), np.random.rand(), torch.rand(3))
    save_checkpoint(tmp_path / "c.pt", state)

    loaded = load_checkpoint(tmp_path / "c.pt")
    restored = model_from_checkpoint(loaded)
    for name, tensor in model.state_dict().items():
        assert torch.equal(restored.state_dict()[name], tensor), name
    opt2 = torch.optim.Adam(restored.parameters(), lr=0.5)
    up2 = Updater(restored, opt2, LrSchedule(opt2, 0.01, warmup_steps=10))
    up2.load_state_dict(loaded["updater"])
    assert up2.lr == up.lr and up2.schedule.steps == 2
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(opt2.state_dict()["state"][0][key], up.optimizer.state_dict()["state"][0][key])
    random.seed(0), np.random.seed(0), torch.manual_seed(0)  # disturb every generator
    restore_rng_state(loaded["rng"])
    got = (random.random(), np.random.rand(), torch.rand(3))
    assert got[0] == expected[0] and got[1] == expected[1] and torch.equal(got[2], expected[2])
    assert loaded["sampler"] == {"epoch": 1, "batches_done": 4}


def test_keeps_only_the_newest(tmp_path):
    ckpts = CheckpointDir(tmp_path, keep=2)
    for step in (3, 6, 9, 12):
        ckpts.save(trained_state(step)[2])
    assert [p.name for p in ckpts.periodic()] == ["step-000000009.pt", "step-000000012.pt"]
    assert ckpts.load_newest()["step"] == 12
    assert not list(tmp_path.glob(".*tmp*"))  # no temporary files left behind


@pytest.mark.parametrize("damage", ["truncate", "garbage", "not_a_checkpoint"])
def test_corrupt_newest_falls_back_with_warning(tmp_path, caplog, damage):
    ckpts = CheckpointDir(tmp_path, keep=3)
    for step in (3, 6):
        ckpts.save(trained_state(step)[2])
    newest = ckpts.periodic()[-1]
    if damage == "truncate":
        newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    elif damage == "garbage":
        newest.write_bytes(b"\x00junk" * 100)
    else:
        torch.save({"model": {}}, newest)
    with caplog.at_level("WARNING"):
        state = ckpts.load_newest()
    assert state["step"] == 3
    assert "step-000000006.pt" in caplog.text and "falling back" in caplog.text
    with pytest.raises(CorruptCheckpoint, match="step-000000006.pt"):
        load_checkpoint(newest)


def test_all_corrupt_is_an_error_and_none_is_a_fresh_start(tmp_path):
    ckpts = CheckpointDir(tmp_path / "c", keep=3)
    assert ckpts.load_newest() is None
    ckpts.save(trained_state(3)[2])
    ckpts.periodic()[0].write_bytes(b"")
    with pytest.raises(InputError, match="no readable checkpoint"):
        ckpts.load_newest()


def test_resolve_names(tmp_path):
    ckpts = CheckpointDir(tmp_path, keep=3)
    with pytest.raises(InputError, match="no last checkpoint"):
        ckpts.resolve("last")
    path = ckpts.save(trained_state(3)[2])
    ckpts.copy_to(path, ckpts.best)
    assert ckpts.resolve("best") == ckpts.best and ckpts.resolve(str(path)) == path
    ckpts.copy_to(path, tmp_path / "avg-last2.pt")
    assert ckpts.resolve("avg-last2") == tmp_path / "avg-last2.pt"
    with pytest.raises(InputError, match="python -m asr.average"):
        ckpts.resolve("avg-best2")
    with pytest.raises(InputError, match="checkpoint not found"):
        ckpts.resolve(str(tmp_path / "nope.pt"))
