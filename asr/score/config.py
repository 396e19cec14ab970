"""Configuration of scoring (Hydra group `score`)."""

from dataclasses import dataclass
from typing import ClassVar

from asr.utils.checks import Check, one_of


@dataclass
class ScoreConfig:
    kind: str = "jiwer"  # jiwer (asr.score.wer, Kaldi text) | hub5 (stm/ctm/GLM, asr.score.hub5)
    per_speaker: bool = True  # also write wer_by_speaker.md
    # kind=hub5
    backend: str = "auto"  # auto: SCTK if installed, else native (logged) | sctk | native
    sctk_bin: str = ""  # dir of hubscr.pl/sclite; empty: /usr/lib/sctk/bin, then $PATH
    # Both must be readable: Hub5 scoring never falls back to another metric.
    stm: str = "auto"  # auto: <data_dir>/<set>/stm | a path
    glm: str = "auto"  # auto: <data_dir>/<set>/glm | a path

    CHECKS: ClassVar[dict[str, Check]] = {"kind": one_of("jiwer", "hub5"), "backend": one_of("auto", "sctk", "native")}
