"""Configuration of scoring (Hydra group `score`)."""

from dataclasses import dataclass


@dataclass
class ScoreConfig:
    kind: str = "jiwer"  # jiwer | hub5 (NIST SCTK)
