import os
import sys

from asr.stage import stage_main
from asr.utils.memory import KERNEL_CACHE_VARIABLE, KERNEL_CACHE_CAPACITY


def test_a_stage_runs_with_oneDNNs_kernel_cache_bounded(tmp_path, monkeypatch):
    monkeypatch.setenv(KERNEL_CACHE_VARIABLE, "unset")  # recorded, so that the stage's setting is undone
    monkeypatch.delenv(KERNEL_CACHE_VARIABLE)
    monkeypatch.setattr(sys, "argv", ["asr.example", f"exp_dir={tmp_path / 'exp'}"])
    seen = []
    stage_main("example")(lambda cfg: seen.append(os.environ.get(KERNEL_CACHE_VARIABLE)))()
    assert seen == [str(KERNEL_CACHE_CAPACITY)]
