"""What making one set did: every recipe's driver returns a `SetSummary` per set and ends
with its log line (`log_summary`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger("asr.features")


@dataclass
class SetSummary:
    name: str
    utterances: int
    frames: int
    seconds: float
    wall_seconds: float
    skipped_utterances: int
    skipped: bool = False  # True when the set was complete already
    share: str = ""  # "I-of-N" when only that share was computed (features.split.index)


def log_summary(s: SetSummary) -> None:
    """One log line of what extracting a set did (every recipe's driver ends with it)."""
    rtf = s.wall_seconds / s.seconds if s.seconds else float("nan")
    log.info(
        "%s: %d utterances, %d frames, %.1f s of audio in %.1f s (real-time factor %.4f); %d utterances skipped",
        s.name,
        s.utterances,
        s.frames,
        s.seconds,
        s.wall_seconds,
        rtf,
        s.skipped_utterances,
    )
