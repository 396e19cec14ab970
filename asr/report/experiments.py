"""What an experiment directory tells about itself, for the comparison report.

One row per scored decode dir of the set: `decode_<set>` and its variants `decode_<set>_<suffix>`
(`decode.dir_suffix`: greedy beside beam+LM, an averaged checkpoint, ...), as Kaldi users list
`exp/*/decode*`. Read, where present: `train_log.csv` (last row: epoch, elapsed_s),
`train_config.yaml` (model, tokenizer; the distributed algorithm from `.hydra/train/config.yaml`), the decode dir's
`decode.record.json` (how it was decoded, from which checkpoint; for dirs decoded before records
existed, `.hydra/decode/config.yaml` when its dir_suffix names this dir), `wer.json` (SWB,
CallHome, total), and `.hydra/score/config.yaml` and `hub5/scorer.txt` (which scorer). A
directory without any scored decode dir is not a scored experiment and is skipped (the caller
logs it).
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from asr.score.report import kaldi_wer_line
from asr.utils.record import read_record, record_path


@dataclass
class Experiment:
    name: str
    path: Path
    decode_dir: str = ""
    config: str = ""
    epochs: int | None = None
    train_seconds: float | None = None
    decoding: str = ""
    scorer: str = ""
    wer: dict[str, float] = field(default_factory=dict)  # subset -> WER %
    boundaries: float | None = None  # a GMM system's alignments: % of phone boundaries within tolerance


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


def training_config(exp_dir: Path) -> dict:
    """train_config.yaml (what the model needs), and the distributed algorithm from the training
    stage's resolved config where train_config.yaml has none."""
    config = _yaml(exp_dir / "train_config.yaml")
    resolved = _yaml(exp_dir / ".hydra" / "train" / "config.yaml")
    if "distributed" not in config and "distributed" in resolved:
        config["distributed"] = resolved["distributed"]
    return config


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


def decode_dirs(exp_dir: Path, eval_set: str) -> list[Path]:
    """The scored decode dirs of a set: `decode_<set>` first, then its suffixed variants."""
    variants = sorted(p for p in exp_dir.glob(f"decode_{eval_set}_*") if p.is_dir())
    return [d for d in [exp_dir / f"decode_{eval_set}", *variants] if (d / "wer.json").is_file()]


def decode_options(exp_dir: Path, decode_dir: Path, eval_set: str) -> dict:
    """How this dir was decoded: its stage record's options, else the experiment's last decode
    config when that one wrote this dir (its dir_suffix), else nothing known."""
    record = read_record(record_path(decode_dir, "decode"))
    if record is not None:
        return record["options"] or {}
    last = _yaml(exp_dir / ".hydra" / "decode" / "config.yaml").get("decode", {})
    suffix = decode_dir.name.removeprefix(f"decode_{eval_set}")
    return last if last.get("dir_suffix", "") == suffix else {}


def describe_decoding(exp_dir: Path, options: dict) -> str:
    """`beam+LM (0.5, 2.0 tuned)`, `greedy`, ...; the checkpoint when it is not the last one."""
    kind = options.get("kind", "")
    if kind == "beam_lm":
        tuned = exp_dir / "lm_tuning.json"
        if options.get("use_tuned") and tuned.is_file():
            best = json.loads(tuned.read_text()).get("best", {})
            kind = f"beam+LM ({best.get('lm_weight')}, {best.get('word_score')} tuned)"
        else:
            kind = f"beam+LM ({options.get('lm_weight')}, {options.get('word_score')})"
    checkpoint = options.get("checkpoint")
    return f"{kind}, {checkpoint}" if checkpoint not in (None, "last") else kind


def describe_scorer(exp_dir: Path, decode_dir: Path) -> str:
    """score.kind of the last score run; for hub5 also which backend scored (sctk/native)."""
    kind = _yaml(exp_dir / ".hydra" / "score" / "config.yaml").get("score", {}).get("kind", "")
    scorer_txt = decode_dir / "hub5" / "scorer.txt"
    if kind == "hub5" and scorer_txt.is_file():
        return f"hub5/{scorer_txt.read_text().strip()}"
    return kind


GMM_KINDS = {
    "mono": "monophone GMM-HMM",
    "tri": "triphone GMM-HMM",
    "lda_mllt": "LDA+MLLT GMM-HMM",
    "sat": "SAT GMM-HMM (LDA+MLLT+fMLLR)",
}


def gmm_system(exp_dir: Path) -> dict:
    """A GMM system dir's summary.json (python -m asr.gmm), or {} for any other dir."""
    summary = exp_dir / "summary.json"
    if not (exp_dir / "final.mdl").is_file() or not summary.is_file():
        return {}
    try:
        return json.loads(summary.read_text())
    except json.JSONDecodeError:
        return {}


def describe_gmm(system: dict) -> str:
    """`SAT GMM-HMM (LDA+MLLT+fMLLR), 176 pdfs, 10,000 Gaussians`."""
    kind = GMM_KINDS.get(system.get("kind", ""), f"GMM-HMM {system.get('kind', '')}".strip())
    return f"{kind}, {system.get('num_pdfs', '?'):,} pdfs, {system.get('num_gauss', '?'):,} Gaussians"


def boundary_accuracy(system: dict) -> float | None:
    """% of the reference phone boundaries its alignments put within tolerance (gmm.phone_timings)."""
    accuracy = (system.get("boundaries") or {}).get("accuracy")
    return None if accuracy is None else 100.0 * accuracy


def describe_gmm_decoding(decode_dir: Path) -> str:
    adapted = (decode_dir / "trans.ark").is_file()
    return "HCLG, 2 passes (speaker-independent, then fMLLR)" if adapted else "HCLG"


def read_experiments(exp_dir: str | os.PathLike, eval_set: str = "eval2000") -> list[Experiment]:
    """One row per scored decode dir of eval_set; none for a directory with none."""
    exp_dir = Path(exp_dir)
    system = gmm_system(exp_dir)
    if system:
        return [
            Experiment(
                name=exp_dir.name,
                path=exp_dir,
                decode_dir=decode_dir.name,
                config=describe_gmm(system),
                train_seconds=system.get("train_seconds"),
                decoding=describe_gmm_decoding(decode_dir),
                scorer=describe_scorer(exp_dir, decode_dir),
                wer=read_wer(decode_dir),
                boundaries=boundary_accuracy(system),
            )
            for decode_dir in decode_dirs(exp_dir, eval_set)
        ]
    epochs, seconds = read_train_log(exp_dir / "train_log.csv")
    config = describe_config(training_config(exp_dir))
    return [
        Experiment(
            name=exp_dir.name,
            path=exp_dir,
            decode_dir=decode_dir.name,
            config=config,
            epochs=epochs,
            train_seconds=seconds,
            decoding=describe_decoding(exp_dir, decode_options(exp_dir, decode_dir, eval_set)),
            scorer=describe_scorer(exp_dir, decode_dir),
            wer=read_wer(decode_dir),
        )
        for decode_dir in decode_dirs(exp_dir, eval_set)
    ]


def read_wer(decode_dir: Path) -> dict[str, float]:
    return {
        subset: float(values["wer"]) for subset, values in json.loads((decode_dir / "wer.json").read_text()).items()
    }


def best_wer_lines(exp_dir: str | os.PathLike, eval_set: str = "eval2000", subset: str = "total") -> list[str]:
    """Kaldi's best_wer.sh over an experiment: its decode dir of the lowest `subset` WER as a
    `%WER ...` line, and that dir's other subsets after it; none without a scored decode dir."""
    scored = [(json.loads((d / "wer.json").read_text()), d) for d in decode_dirs(Path(exp_dir), eval_set)]
    scored = [(report, d) for report, d in scored if subset in report]
    if not scored:
        return []
    report, best = min(scored, key=lambda item: item[0][subset]["wer"])
    order = [subset] + [name for name in report if name != subset]
    return [kaldi_wer_line(report[name], f"{best} {name}") for name in order]
