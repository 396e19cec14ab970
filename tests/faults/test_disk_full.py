"""A full disk while saving a checkpoint and while the features stage writes: one message naming
the file (ENOSPC), exit 2, and the previous complete output left as it was. Each test mounts its
own small tmpfs in a private mount namespace (skipped, with the reason, where that is refused)."""

from __future__ import annotations

import json

from tests.faults.conftest import features_overrides, on_small_tmpfs, tone, write_wav_data_dir

CHECKPOINT = """
import json, os, torch
from asr.models.checkpoint import load_checkpoint, save_checkpoint
from asr.utils.atomic import DiskFull
target = os.path.join({mnt!r}, "exp", "checkpoints", "step-000000200.pt")
save_checkpoint(target, {{"weights": torch.ones(1000)}})  # fits: 4 kB
try:
    save_checkpoint(target, {{"weights": torch.zeros(1 << 20)}})  # 4 MiB into 1 MiB
    result = {{"error": None}}
except DiskFull as err:
    result = {{"error": str(err)}}
result["left"] = sorted(os.listdir(os.path.dirname(target)))
result["kept"] = float(torch.load(target, weights_only=True)["weights"].sum())
print(json.dumps(result))
"""


def test_checkpoint_on_a_full_disk(tmp_path):
    mnt = tmp_path / "small"
    proc = on_small_tmpfs(mnt, "1m", CHECKPOINT.format(mnt=str(mnt)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    target = mnt / "exp/checkpoints/step-000000200.pt"
    # torch.save itself says "enforce fail at inline_container.cc ... unexpected pos"
    assert result["error"] == (
        f"{target}: no space left on device (ENOSPC) while writing it; free space on {mnt} "
        "(or write elsewhere) and re-run: nothing was replaced"
    )
    assert result["left"] == ["step-000000200.pt", "train.record.json"]  # no temporary left behind
    assert result["kept"] == 1000.0  # the previous checkpoint, whole


FEATURES = """
import json, runpy, sys
from pathlib import Path
sys.argv = ["asr.features", *{overrides!r}]
try:
    runpy.run_module("asr.features", run_name="__main__", alter_sys=True)
    code = 0
except SystemExit as end:
    code = end.code
print(json.dumps({{"code": code, "left": sorted(str(p) for p in Path({feats!r}).rglob("*"))}}))
"""


def test_features_stage_on_a_full_disk(tmp_path):
    for name, seconds in (("train", 30.0), ("dev", 1.0), ("eval", 1.0)):
        write_wav_data_dir(tmp_path, {f"{name}{i}-A": tone(seconds, i) for i in range(3)}, name)
    mnt = tmp_path / "small"
    overrides = features_overrides(
        tmp_path, f"features.feats_dir={mnt}"
    )  # 3 x 120 kB of compressed features into 256 kB
    proc = on_small_tmpfs(mnt, "256k", FEATURES.format(overrides=overrides, feats=str(mnt)))
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["code"] == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "Traceback" not in proc.stderr
    assert errors[0].endswith(
        f"{mnt}/logmel40/train: no space left on device (ENOSPC) while writing it; "
        f"free space on {mnt} (or write elsewhere) and re-run: nothing was replaced"
    )
    assert result["left"] == [f"{mnt}/logmel40"]  # the partial set was removed, nothing looks complete
