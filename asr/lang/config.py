"""Configuration of the lang stage (Hydra group `lang`): the pronunciation lexicon and the
Kaldi lang dir made from it."""

from dataclasses import dataclass
from typing import ClassVar

from asr.utils.checks import Check


def _probability_inside(v: float) -> str | None:
    return None if 0.0 < v < 1.0 else "must be in (0, 1)"


@dataclass
class LangConfig:
    # The MS98-format pronunciation dictionary (the synthetic corpus ships one; the Switchboard
    # release has it in swb_ms98_transcriptions/).
    dictionary: str = "${data.ms98_dir}/sw-ms98-dict.text"
    dir: str = "${data.data_dir}/lang"  # the Kaldi lang dir: phones.txt, words.txt, topo, L.fst, phones/
    sil_prob: float = 0.5  # probability of the optional silence between words (prepare_lang.sh's default)
    force: bool = False  # rebuild the lang dir even if it was made from the same dictionary

    CHECKS: ClassVar[dict[str, Check]] = {"sil_prob": _probability_inside}
