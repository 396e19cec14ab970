"""The score stage: for each decoded set, score `decode_<set>/hyp.txt` against
`<data.data_dir>/<set>/text`, write the reports beside the hypothesis and print the tables.

A set is scored again unless its stage record (`decode_<set>/score.record.json`) names the same
score options (and Hub5 scorer) and unchanged inputs: the hypotheses and the references it
compares. A set scored already prints the table its `wer.md` holds.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig, OmegaConf

from asr.decode.output import decode_dir, evaluation_sets  # not from acoustic: scoring needs no torch
from asr.score.hub5.scorer import reference_file, score_hub5, scorer_name
from asr.score.report import WER_MD, markdown_table, write_reports
from asr.score.result import ScoreResult
from asr.score.wer import score_files
from asr.utils.errors import InputError
from asr.utils.record import outputs_of, record_path, why_rerun, write_record

log = logging.getLogger(__name__)

HYP_TXT = "hyp.txt"
STAGE, RERUN = "score", "python -m asr.score"


def score_with_jiwer(cfg: DictConfig, set_name: str) -> ScoreResult:
    data = Path(cfg.data.data_dir) / set_name
    return score_files(data / "text", decode_dir(cfg, set_name) / HYP_TXT, data / "utt2spk")


# score.kind -> scorer of one set.
SCORERS: dict[str, Callable[[DictConfig, str], ScoreResult]] = {"jiwer": score_with_jiwer, "hub5": score_hub5}


def scorer(kind: str) -> Callable[[DictConfig, str], ScoreResult]:
    if kind not in SCORERS:
        raise InputError(f"score.kind={kind!r} is not a known scorer; choose one of {sorted(SCORERS)}")
    return SCORERS[kind]


def scored_from(cfg: DictConfig, set_name: str) -> tuple[dict, list[Path]]:
    """What a set's score record names: the score options and the files the scorer compares."""
    out_dir = decode_dir(cfg, set_name)
    options = OmegaConf.to_container(cfg.score, resolve=True)
    if cfg.score.kind == "hub5":
        options["scorer"] = scorer_name(cfg)
        files = [out_dir / "hyp.ctm", out_dir / HYP_TXT, reference_file(cfg, set_name, "stm")]
        files.append(reference_file(cfg, set_name, "glm"))
    else:
        data = Path(cfg.data.data_dir) / set_name
        files = [data / "text", out_dir / HYP_TXT, data / "utt2spk"]
    return options, [f for f in files if f.is_file()]


def score_set(cfg: DictConfig, set_name: str) -> ScoreResult:
    """Score one set and write its reports and record; one log line per subset."""
    result = scorer(cfg.score.kind)(cfg, set_name)
    out_dir = decode_dir(cfg, set_name)
    outputs = {path.name: True for path in write_reports(result, out_dir, per_speaker=cfg.score.per_speaker)}
    if cfg.score.kind == "hub5":
        outputs |= {f"hub5/{name}": True for name in outputs_of(out_dir / "hub5")}
    write_record(out_dir, STAGE, RERUN, *scored_from(cfg, set_name), outputs)
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


def wer_table(cfg: DictConfig, set_name: str) -> str:
    """The set's WER table: kept from wer.md when its record says the score is up to date, else scored now."""
    out_dir = decode_dir(cfg, set_name)
    reason = why_rerun(out_dir, STAGE, *scored_from(cfg, set_name))
    if reason is None:
        log.info("%s: scored already (%s), skipping", set_name, record_path(out_dir, STAGE))
        return (out_dir / WER_MD).read_text()
    log.info("%s: scoring (%s)", set_name, reason)
    return markdown_table(score_set(cfg, set_name).subsets)


def run(cfg: DictConfig) -> dict[str, str]:
    """Score every set (unless scored already), then print each set's Markdown table to stdout."""
    tables = {set_name: wer_table(cfg, set_name) for set_name in evaluation_sets(cfg)}
    for set_name, table in tables.items():
        print(f"\n### {cfg.exp_name}: {decode_dir(cfg, set_name).name}\n\n{table}", end="")
    return tables
