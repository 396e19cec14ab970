"""Issue 31, item 3, for checkpoints: a checkpoint swapped for another (same format, other
weights) or damaged in place is refused before torch reads it, in one line naming it and the
stage that wrote it (exit 2 from a stage), and a resume falls back to the previous one."""

from __future__ import annotations

import shutil

import pytest
import torch

from asr.models.checkpoint import REQUIRED_KEYS, CheckpointDir, CorruptCheckpoint, load_checkpoint, save_checkpoint


def state(step: int, weight: float) -> dict:
    values = {key: {} for key in REQUIRED_KEYS}
    return values | {"format": 1, "model": {"w": torch.full((4,), weight)}, "step": step, "epoch": 0}


@pytest.fixture
def checkpoints(tmp_path):
    directory = CheckpointDir(tmp_path / "exp" / "checkpoints", keep=3)
    for step in (1, 2):
        directory.save(state(step, float(step)))
    return directory


def test_a_swapped_checkpoint_is_refused_and_resume_falls_back(checkpoints, tmp_path, caplog):
    newest = checkpoints.periodic()[-1]
    other = save_checkpoint(tmp_path / "other" / "last.pt", state(2, 9.0))  # another experiment's
    shutil.copyfile(other, newest)
    with pytest.raises(CorruptCheckpoint) as err:
        load_checkpoint(newest)
    message = str(err.value)
    assert message.startswith(f"{newest}: damaged, truncated or replaced checkpoint (") and "\n" not in message
    assert message.endswith("re-run the train stage (python -m asr.train)")
    with caplog.at_level("WARNING"):
        assert checkpoints.load_newest()["step"] == 1
    assert "falling back to the previous checkpoint" in caplog.text


def test_a_byte_changed_in_the_weights_is_refused(checkpoints):
    path = checkpoints.periodic()[0]
    data = bytearray(path.read_bytes())
    at = data.find(torch.full((4,), 1.0).numpy().tobytes())  # the stored tensor's bytes
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpoint, match=r"\(sha1 differs from the one the stage wrote"):
        load_checkpoint(path)


def test_copies_and_averages_are_recorded_by_their_stage(checkpoints, tmp_path):
    checkpoints.copy_to(checkpoints.periodic()[-1], checkpoints.last)
    assert load_checkpoint(checkpoints.last)["step"] == 2
    average = save_checkpoint(checkpoints.dir / "avg-last2.pt", state(2, 1.5), stage="average")
    average.write_bytes(average.read_bytes()[:-10])
    with pytest.raises(CorruptCheckpoint, match=r"re-run the average stage \(python -m asr.average\)$"):
        load_checkpoint(average)
