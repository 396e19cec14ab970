"""What an experiment directory tells about itself, for the comparison report.

Read, where present: `train_log.csv` (last row: epoch, elapsed_s), `train_config.yaml`
(model, tokenizer, distributed algorithm, batch), `.hydra/decode/config.yaml` (how the last
decode searched), `decode_<set>/wer.json` (SWB, CallHome, total) and
`.hydra/score/config.yaml` and `decode_<set>/hub5/scorer.txt` (which scorer). A directory without any wer.json is
not a scored experiment and is skipped (the caller logs it).
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml


@dataclass
class Experiment:
    name: str
    path: Path
    config: str = ""
    epochs: int | None = None
    train_seconds: float | None = None
    decoding: str = ""
    scorer: str = ""
    wer: dict[str, float] = field(default_factory=dict)  # subset -> WER %


def _yaml(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError:
        return {}


def describe_config(train_cfg: dict) -> str:
    """A short summary: `blstm 3x256, char40, adpsgd` (what differs between runs)."""
    model, tok = train_cfg.get("model", {}), train_cfg.get("tokenizer", {})
    parts = []
    if model:
        parts.append(f"{model.get('name', 'model')} {model.get('num_layers', '?')}x{model.get('hidden_size', '?')}")
    if tok:
        parts.append(f"{tok.get('model_type', '')}{tok.get('vocab_size', '')}")
    algorithm = (train_cfg.get("distributed") or {}).get("algorithm")
    if algorithm and algorithm != "none":
        parts.append(str(algorithm))
    return ", ".join(parts)


def read_train_log(path: Path) -> tuple[int | None, float | None]:
    if not path.is_file():
        return None, None
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return None, None
    last = rows[-1]
    epoch = int(float(last["epoch"])) if last.get("epoch") else None
    seconds = float(last["elapsed_s"]) if last.get("elapsed_s") else None
    return epoch, seconds


def describe_decoding(exp_dir: Path) -> str:
    decode = _yaml(exp_dir / ".hydra" / "decode" / "config.yaml").get("decode", {})
    if decode.get("kind") == "beam_lm":
        tuned = exp_dir / "lm_tuning.json"
        if decode.get("use_tuned") and tuned.is_file():
            best = json.loads(tuned.read_text()).get("best", {})
            return f"beam+LM ({best.get('lm_weight')}, {best.get('word_score')} tuned)"
        return f"beam+LM ({decode.get('lm_weight')}, {decode.get('word_score')})"
    return decode.get("kind", "")


def describe_scorer(exp_dir: Path, eval_set: str) -> str:
    """score.kind of the last score run; for hub5 also which backend scored (sctk/native)."""
    kind = _yaml(exp_dir / ".hydra" / "score" / "config.yaml").get("score", {}).get("kind", "")
    scorer_txt = exp_dir / f"decode_{eval_set}" / "hub5" / "scorer.txt"
    if kind == "hub5" and scorer_txt.is_file():
        return f"hub5/{scorer_txt.read_text().strip()}"
    return kind


def read_experiment(exp_dir: str | os.PathLike, eval_set: str = "eval2000") -> Experiment | None:
    exp_dir = Path(exp_dir)
    wer_json = exp_dir / f"decode_{eval_set}" / "wer.json"
    if not wer_json.is_file():
        return None
    wer = {subset: float(values["wer"]) for subset, values in json.loads(wer_json.read_text()).items()}
    epochs, seconds = read_train_log(exp_dir / "train_log.csv")
    return Experiment(
        name=exp_dir.name,
        path=exp_dir,
        config=describe_config(_yaml(exp_dir / "train_config.yaml")),
        epochs=epochs,
        train_seconds=seconds,
        decoding=describe_decoding(exp_dir),
        scorer=describe_scorer(exp_dir, eval_set),
        wer=wer,
    )
