"""The experiment's config snapshot, the guard that refuses to resume under a changed one, and
starting an experiment over.

`<exp_dir>/train_config.yaml` holds the groups that decide what the model is and what it is
trained on (model, data, features, tokenizer). A re-run compares the current config with it:
a changed value stops training with a message listing the changed keys, unless
`train.force=true`, which logs them as a warning and records the new config; a key only one
side has (an option the toolkit gained or dropped since) is listed as a warning. Keys that do
not change what the model sees (where the corpus lives, how many processes extract
features) are ignored. The snapshot is written only once the run has built its model and data
and found where to start (`save_config`), so a run that fails before that changes nothing.

`train.restart=true` moves the experiment's training outputs (checkpoints, log, plots,
snapshot) to `<exp_dir>/previous/<N>/` and starts afresh: nothing is deleted.

Beside the snapshot, the stage record `<exp_dir>/train.record.json` (asr/utils/record.py)
names the files training reads (`training_inputs`: each set's transcripts and feature table,
the tokenizer model). When one has changed since (the tokenizer re-trained on an edited
transcript, say), a finished experiment is restarted the same way, with the reason in the
log; an unfinished one is refused, since its checkpoints were trained on the old inputs.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from asr.features.featureset import feature_set_dir
from asr.text.tokenizer import tokenizer_model_path
from asr.train.record import RECORD_DIR
from asr.utils.atomic import write_text
from asr.utils.errors import InputError
from asr.utils.record import record_path, why_rerun, write_record

log = logging.getLogger(__name__)

GUARDED_GROUPS = ("model", "data", "features", "tokenizer")
IGNORED_KEYS = {
    "data.swbd_dir",
    "data.ms98_dir",
    "data.eval2000_dir",
    "data.eval2000_text_dir",
    "data.expected_sph_files",
    "features.jobs",
}
SNAPSHOT_NAME = "train_config.yaml"
STAGE = "train"
RERUN = "python -m asr.train"


def guarded_config(cfg) -> dict:
    return {group: OmegaConf.to_container(cfg[group], resolve=True) for group in GUARDED_GROUPS if group in cfg}


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def config_changes(saved: dict, current: dict) -> tuple[list[str], list[str]]:
    """('key: old -> new' for every guarded key set on both sides that differs, the same for
    the keys only one side has: options the toolkit gained or lost since the snapshot)."""
    old, new = flatten(saved), flatten(current)
    missing = "(absent)"
    keys = [
        key
        for key in sorted(set(old) | set(new))
        if key not in IGNORED_KEYS and old.get(key, missing) != new.get(key, missing)
    ]
    lines = {key: f"{key}: {old.get(key, missing)!r} -> {new.get(key, missing)!r}" for key in keys}
    return [lines[k] for k in keys if k in old and k in new], [lines[k] for k in keys if (k in old) != (k in new)]


def check_config(exp_dir: str | Path, cfg, force: bool = False) -> list[str]:
    """Refuse a changed model/data config unless forced; returns the changes (forced ones).
    Options the toolkit gained or dropped since the snapshot cannot have been set by the run
    that wrote it: they are listed as a warning, not refused."""
    path = Path(exp_dir) / SNAPSHOT_NAME
    if not path.is_file():
        return []
    saved = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    changes, toolkit = config_changes(saved, guarded_config(cfg))  # type: ignore[arg-type]
    if toolkit:
        log.warning(
            "%s: options added or removed by the toolkit since this experiment started (continuing):\n  %s",
            path,
            "\n  ".join(toolkit),
        )
    if changes and not force:
        raise InputError(
            f"{path}: this experiment was trained with a different model/data config:\n  "
            + "\n  ".join(changes)
            + "\nUse a new exp_name, or pass train.force=true to continue with the new config."
        )
    if changes:
        log.warning("train.force=true: continuing with a changed config:\n  %s", "\n  ".join(changes))
    return changes


def save_config(exp_dir: str | Path, cfg) -> None:
    """Record what this experiment trains, and from which files (after the run has started for real)."""
    write_text(Path(exp_dir) / SNAPSHOT_NAME, OmegaConf.to_yaml(OmegaConf.create(guarded_config(cfg))))
    write_record(exp_dir, STAGE, RERUN, {}, training_inputs(cfg), {})


def training_inputs(cfg) -> list[Path]:
    """The files a training reads that other stages write: each set's transcripts and feature
    table, and the tokenizer model of a CTC training (those that exist)."""
    files = []
    for set_name in dict.fromkeys((cfg.data.train_set, cfg.data.dev_set)):
        files += [Path(cfg.data.data_dir) / set_name / "text", feature_set_dir(cfg, set_name) / "feats.scp"]
    if cfg.train.objective == "ctc":
        files.append(tokenizer_model_path(cfg.tokenizer))
    return [f for f in files if f.is_file()]


def restart_if_inputs_changed(exp_dir: str | Path, cfg) -> None:
    """Start a finished experiment afresh when a file it trained on changed; refuse to go on
    with an unfinished one. Experiments recorded before the record existed are left as they are."""
    exp_dir = Path(exp_dir)
    if cfg.train.restart or not record_path(exp_dir, STAGE).is_file():
        return
    reason = why_rerun(exp_dir, STAGE, {}, training_inputs(cfg))
    if reason is None:
        return
    if not (exp_dir / "checkpoints" / "last.pt").is_file():
        raise InputError(
            f"{reason}, but {exp_dir} is part-trained on the old one: restore it, or pass train.restart=true "
            "to start afresh (the outputs so far move to previous/<N>/)"
        )
    restart_experiment(exp_dir, why=reason)


TRAINING_OUTPUTS = (
    "checkpoints",
    "train_log.csv",
    "loss.png",
    "timing",
    "bad_utterances.txt",
    RECORD_DIR,
    SNAPSHOT_NAME,
    f"{STAGE}.record.json",
)


def training_history(exp_dir: str | Path) -> list[str]:
    """What an earlier run of the experiment left: its training outputs that exist."""
    return [name for name in TRAINING_OUTPUTS if (Path(exp_dir) / name).exists()]


def restart_experiment(exp_dir: str | Path, why: str = "train.restart=true") -> Path | None:
    """Move the training outputs to `<exp_dir>/previous/<N>/` (the first free N)."""
    exp_dir = Path(exp_dir)
    found = training_history(exp_dir)
    if not found:
        return None
    n = 1
    while (exp_dir / "previous" / str(n)).exists():
        n += 1
    target = exp_dir / "previous" / str(n)
    target.mkdir(parents=True)
    for name in found:
        (exp_dir / name).rename(target / name)
    log.warning("%s: moved %s to %s; training starts afresh", why, ", ".join(found), target)
    return target
