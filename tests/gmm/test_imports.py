"""The GMM stages' processes start without torch (its import costs about 1.5 s of CPU, more
than many a stage's work on a small corpus): their modules read numpy matrices and use the
numpy estimators of asr/features, the stage that writes a SAT system's adapted features for the
neural model (asr.gmm.fmllr_feats) included."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import asr.gmm

# Imports the modules one by one in a fresh interpreter, failing at the first that loads torch.
PROBE = """
import importlib, sys
for module in sys.argv[1:]:
    importlib.import_module(module)
    assert "torch" not in sys.modules, module
"""


def test_no_gmm_stage_module_imports_torch():
    modules = [m.name for m in pkgutil.walk_packages(asr.gmm.__path__, "asr.gmm.")]
    modules = sorted({*modules, "asr.gmm.__main__", "asr.gmm.decode.__main__", "asr.gmm.fmllr_feats.__main__"})
    assert {"asr.gmm.stage", "asr.gmm.transformed", "asr.gmm.adapted_features"} <= set(modules)
    done = subprocess.run([sys.executable, "-c", PROBE, *modules], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
