"""Where a SAT GMM-HMM system's speaker-adapted sets lie, and the stage name of their records:
the hand-off between `python -m asr.gmm.fmllr_feats`, which writes them, and
features.fmllr.system (asr.features.fmllr.recipe), which reads them. It imports no torch, as
the GMM stages do not."""

from __future__ import annotations

from pathlib import Path

FMLLR_FEATS_STAGE = "fmllr_feats"  # the stage record of a GMM system's adapted set (asr.gmm.adapted_features)


def system_set_dir(system: str, set_name: str) -> Path:
    """Where a SAT GMM-HMM system's speaker-adapted features of a set are (asr.gmm.adapted_features)."""
    return Path(system) / "fmllr_feats" / set_name
