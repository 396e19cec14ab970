"""Configuration of scoring (Hydra group `score`)."""

from dataclasses import dataclass


@dataclass
class ScoreConfig:
    kind: str = "jiwer"  # jiwer (asr.score.wer) | hub5 (NIST SCTK, a later scorer)
    per_speaker: bool = True  # also write wer_by_speaker.md
