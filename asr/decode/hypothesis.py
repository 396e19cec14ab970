"""What every CTC search returns for one utterance, whatever the search (greedy or beam).

Word timing and output code (asr.decode.output) serve every search through this type.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Hypothesis:
    tokens: list[int] = field(default_factory=list)  # blank-free token ids
    frames: list[int] = field(default_factory=list)  # output frame where each token is emitted
    probs: list[float] = field(default_factory=list)  # its posterior at that frame (a confidence)
