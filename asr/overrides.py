"""A recipe's Hydra overrides checked before its first stage runs, one line per mistake:

    python -m asr.overrides train.epoch=2 distributed=foo
    train.epoch: unknown key; did you mean train.epochs?
    distributed=foo: no such choice; choose one of adpsgd, hadpsgd, none, ssgd (conf/distributed/)

run.sh calls it on its whole command line (exit 2 if anything is printed), so a typo is found
whatever stages are skipped, not by the first stage that reads the key, and without Hydra's
advice to append the key with `+`. Keys are looked up in the config schema (asr/config.py's
dataclasses) and group choices in conf/<group>/, without composing the config (a fraction of
the time); values are checked by each stage, against the same schema (asr.config.check_config).
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
import typing
from pathlib import Path

from asr.config import AsrConfig
from asr.train.config import RENAMED as TRAIN_RENAMED
from asr.utils.experiment_groups import CONF_DIR

HYDRA_PREFIXES = ("hydra.", "hydra/")
RENAMED = {f"train.{old}": f"train.{new}" for old, new in TRAIN_RENAMED.items()}  # still read


def renamed_note(override: str) -> str | None:
    """A line for a key that has a new name (the old one still works); None otherwise."""
    key = override.lstrip("+~").partition("=")[0]
    return f"{key} is now {RENAMED[key]} (the old name still works)" if key in RENAMED else None


def group_choices(group: str, conf_dir: str | Path = CONF_DIR) -> list[str] | None:
    """The options of a config group (conf/<group>/*.yaml), None if `group` is no group."""
    folder = Path(conf_dir) / group
    if not folder.is_dir():
        return None
    return sorted(p.stem for p in folder.glob("*.yaml"))


def key_problem(key: str, schema: type = AsrConfig) -> str | None:
    """Why `key` (dotted) names no field of the schema, with the closest one; None if it does."""
    node: object = schema
    walked: list[str] = []
    for part in key.split("."):
        if not (isinstance(node, type) and dataclasses.is_dataclass(node)):
            return None  # a dict or list value: its keys are free
        types = typing.get_type_hints(node)
        fields = [f.name for f in dataclasses.fields(node)]
        if part not in fields:
            prefix = "".join(f"{w}." for w in walked)
            close = difflib.get_close_matches(part, fields, n=3)
            hint = "; did you mean " + " or ".join(prefix + c for c in close) + "?" if close else ""
            return f"{key}: unknown key{hint}"
        node = types[part]
        walked.append(part)
    return None


def override_problem(override: str, conf_dir: str | Path = CONF_DIR) -> str | None:
    key, sep, value = override.lstrip("+~").partition("=")
    if not sep and not override.startswith("~"):
        return f"{override}: not an override (key=value)"
    if key.startswith(HYDRA_PREFIXES) or "@" in key:
        return None
    choices = group_choices(key, conf_dir)
    if choices is not None and "," not in value and value not in ("null", "") and "/" not in value:
        if value not in choices:
            return f"{key}={value}: no such choice; choose one of {', '.join(choices)} (conf/{key}/)"
        return None
    if choices is not None and "." not in key:
        return None  # a choice Hydra resolves itself (a sweep, a nested path)
    return key_problem(key)


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(f"usage: python -m asr.overrides KEY=VALUE ...\n\n{__doc__}")
        return 0
    for note in filter(None, map(renamed_note, argv)):
        print(note, file=sys.stderr)
    problems = [p for p in (override_problem(o) for o in argv) if p]
    for problem in problems:
        print(problem)
    return 2 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
