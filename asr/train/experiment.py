"""The experiment's config snapshot and the guard that refuses to resume under a changed one.

`<exp_dir>/train_config.yaml` holds the groups that decide what the model is and what it is
trained on (model, data, features, tokenizer). A re-run compares the current config with it:
any difference stops training with a message listing the changed keys, unless
`train.force=true`, which logs them as a warning and records the new config. Keys that do
not change what the model sees (where the corpus lives, how many processes extract
features) are ignored.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from asr.utils.atomic import write_text
from asr.utils.errors import InputError

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


def guarded_config(cfg) -> dict:
    return {group: OmegaConf.to_container(cfg[group], resolve=True) for group in GUARDED_GROUPS if group in cfg}


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def config_changes(saved: dict, current: dict) -> list[str]:
    """'key: old -> new' for every guarded key that differs."""
    old, new = flatten(saved), flatten(current)
    missing = "(absent)"
    return [
        f"{key}: {old.get(key, missing)!r} -> {new.get(key, missing)!r}"
        for key in sorted(set(old) | set(new))
        if key not in IGNORED_KEYS and old.get(key, missing) != new.get(key, missing)
    ]


def check_and_save_config(exp_dir: str | Path, cfg, force: bool = False, write: bool = True) -> None:
    """Refuse a changed model/data config (unless forced); write the snapshot (unless
    write=False: the learners other than rank 0 only check)."""
    path = Path(exp_dir) / SNAPSHOT_NAME
    current = guarded_config(cfg)
    if path.is_file():
        saved = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        changes = config_changes(saved, current)  # type: ignore[arg-type]
        if changes and not force:
            raise InputError(
                f"{path}: this experiment was trained with a different model/data config:\n  "
                + "\n  ".join(changes)
                + "\nUse a new exp_name, or pass train.force=true to continue with the new config."
            )
        if changes:
            log.warning("train.force=true: continuing with a changed config:\n  %s", "\n  ".join(changes))
        else:
            return
    if write:
        write_text(path, OmegaConf.to_yaml(OmegaConf.create(current)))
