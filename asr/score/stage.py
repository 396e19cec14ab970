"""The score stage: for each decoded set, score `decode_<set>/hyp.txt` against
`<data.data_dir>/<set>/text`, write the reports beside the hypothesis and print the tables.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig

from asr.decode.output import decode_dir, evaluation_sets  # not from acoustic: scoring needs no torch
from asr.score.hub5.scorer import score_hub5
from asr.score.report import markdown_table, write_reports
from asr.score.result import ScoreResult
from asr.score.wer import score_files
from asr.utils.errors import InputError

log = logging.getLogger(__name__)

HYP_TXT = "hyp.txt"


def score_with_jiwer(cfg: DictConfig, set_name: str) -> ScoreResult:
    data = Path(cfg.data.data_dir) / set_name
    return score_files(data / "text", decode_dir(cfg, set_name) / HYP_TXT, data / "utt2spk")


# score.kind -> scorer of one set.
SCORERS: dict[str, Callable[[DictConfig, str], ScoreResult]] = {"jiwer": score_with_jiwer, "hub5": score_hub5}


def scorer(kind: str) -> Callable[[DictConfig, str], ScoreResult]:
    if kind not in SCORERS:
        raise InputError(f"score.kind={kind!r} is not a known scorer; choose one of {sorted(SCORERS)}")
    return SCORERS[kind]


def score_set(cfg: DictConfig, set_name: str) -> ScoreResult:
    """Score one set and write its reports; one log line per subset."""
    result = scorer(cfg.score.kind)(cfg, set_name)
    out_dir = decode_dir(cfg, set_name)
    write_reports(result, out_dir, per_speaker=cfg.score.per_speaker)
    for name, counts in result.subsets.items():
        log.info(
            "%s %s: WER %.2f%% (sub %d, del %d, ins %d; %d words, %d sentences)",
            set_name,
            name,
            counts.wer,
            counts.substitutions,
            counts.deletions,
            counts.insertions,
            counts.words,
            counts.sentences,
        )
    log.info("%s: reports in %s", set_name, out_dir)
    return result


def run(cfg: DictConfig) -> dict[str, ScoreResult]:
    """Score every set, then print each set's Markdown table to stdout."""
    results = {set_name: score_set(cfg, set_name) for set_name in evaluation_sets(cfg)}
    for set_name, result in results.items():
        print(f"\n### {cfg.exp_name}: {set_name}\n\n{markdown_table(result.subsets)}", end="")
    return results
