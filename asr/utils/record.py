"""The stage record: what a stage wrote, and from what. One rule for "is this stage done?" and
one check a reader makes before it uses a file another stage wrote.

A stage writes `<dir>/<stage>.record.json` atomically AFTER its outputs:

    stage    the stage's name, and `rerun`, the command that makes the outputs again
    options  the config subtree that changes the result (plain values)
    inputs   {path: identity}: size and mtime, plus a sha1 where the file is small enough
             for the checksum to be cheap (a touched but unchanged file then counts as unchanged)
    outputs  {name relative to <dir>: {"bytes": n}}, plus a sha1 for the files the caller names
             small (models, transforms, tables); archives keep their sizes only

`why_rerun(dir, stage, options, inputs)` is None when the record matches (skip) or the one-line
reason the stage must run again. `verify(path)` finds the record that lists `path` (in its
directory or up to two above) and raises InputError naming the file and the stage to re-run when
its size or sha1 differs from what the stage wrote: a truncated or swapped file is refused
before any library reads it. A file no record lists (made before records existed, or by hand)
is read unchecked.

run.sh decides whether a whole stage is done by the same rule, from the records the stage
wrote, and those why_rerun found up to date while it ran (noted in the file $ASR_RECORDS_USED
names, where run.sh sets it): asr/utils/recipe_record.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from asr.utils.atomic import atomic_path, write_text
from asr.utils.errors import InputError

SUFFIX = ".record.json"
# Inputs up to this size get a sha1 (a second or less); larger ones size and mtime only.
CHEAP_SHA1_BYTES = 256 << 20
# How many directories above a file verify() looks for the record that lists it.
LEVELS_UP = 2
# Set by run.sh: the file where why_rerun notes each record it finds up to date, so that a stage
# that skipped its work by its own record still tells run.sh what it stands on.
USED_RECORDS_ENV = "ASR_RECORDS_USED"


def record_path(directory: str | os.PathLike, name: str) -> Path:
    """`<directory>/<name>.record.json`; the name is the stage's, or a part's where a stage
    records its outputs part by part (the LM stage, one record per order)."""
    return Path(directory) / f"{name}{SUFFIX}"


def sha1_of(path: str | os.PathLike) -> str:
    digest = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def input_identity(path: str | os.PathLike) -> dict:
    """What tells an input's versions apart: its size, mtime and (where cheap) sha1."""
    stat = os.stat(path)
    identity = {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    if stat.st_size <= CHEAP_SHA1_BYTES:
        identity["sha1"] = sha1_of(path)
    return identity


def output_identity(path: str | os.PathLike, checksum: bool) -> dict:
    identity = {"bytes": os.stat(path).st_size}
    if checksum:
        identity["sha1"] = sha1_of(path)
    return identity


def outputs_of(directory: str | os.PathLike, sizes_only: tuple[str, ...] = (".ark",)) -> dict[str, bool]:
    """Every file under `directory` (a stage's whole output dir, records aside) as `outputs` for
    write_record: a sha1 for each, except archives (sizes only: they are large and read in
    pieces)."""
    directory = Path(directory)
    names = (p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())
    return {n: not n.endswith(sizes_only) for n in sorted(names) if not n.endswith(SUFFIX)}


def _plain(options: object) -> object:
    """Options as JSON reads them back (tuples become lists, paths strings), for comparing."""
    return json.loads(json.dumps(options, sort_keys=True, default=str))


def write_record(
    directory: str | os.PathLike,
    stage: str,
    rerun: str,
    options: object,
    inputs: Iterable[str | os.PathLike],
    outputs: Mapping[str, bool],
    name: str | None = None,
) -> Path:
    """Record a finished stage; `outputs` maps names relative to `directory` to whether they
    get a sha1. Call it after every output is in place."""
    directory = Path(directory)
    record = {
        "stage": stage,
        "rerun": rerun,
        "options": _plain(options),
        "inputs": {_key(p): input_identity(p) for p in inputs},
        "outputs": {output: output_identity(directory / output, sha1) for output, sha1 in outputs.items()},
    }
    path = record_path(directory, name or stage)
    save_record(path, record)
    return path


def _key(path: str | os.PathLike) -> str:
    """An input's name in a record: absolute, so a stage run from another directory (or given a
    relative path once and an absolute one later) sees the same input."""
    return os.path.abspath(path)


def save_record(path: Path, record: dict) -> None:
    """Write `record` to `path` atomically."""
    write_text(path, json.dumps(record, indent=1, sort_keys=True) + "\n")


def add_outputs(directory: str | os.PathLike, stage: str, rerun: str, outputs: Mapping[str, bool]) -> None:
    """Add (or refresh) outputs of a stage that writes its files one at a time (checkpoints);
    entries whose file is gone are dropped. One writer per record."""
    directory = Path(directory)
    record = read_record(record_path(directory, stage)) or {"stage": stage, "options": {}, "inputs": {}, "outputs": {}}
    record["rerun"] = rerun
    kept = {name: entry for name, entry in record["outputs"].items() if (directory / name).exists()}
    kept.update({name: output_identity(directory / name, checksum) for name, checksum in outputs.items()})
    record["outputs"] = kept
    save_record(record_path(directory, stage), record)


def _drop_output(path: Path, stage: str) -> None:
    record = read_record(record_path(path.parent, stage))
    if record is not None and record["outputs"].pop(path.name, None) is not None:
        save_record(record_path(path.parent, stage), record)


@contextlib.contextmanager
def recorded_output(path: str | os.PathLike, stage: str, rerun: str, checksum: bool = True) -> Iterator[Path]:
    """atomic_path() for one output of a stage that writes its files one at a time: the file's
    old entry is dropped before it is replaced and the new one added after, so a crash in
    between leaves the file unchecked, never falsely refused."""
    path = Path(path)
    _drop_output(path, stage)
    with atomic_path(path) as tmp:
        yield tmp
    add_outputs(path.parent, stage, rerun, {path.name: checksum})


def read_record(path: Path) -> dict | None:
    """The record at `path`; None when there is none or it is unreadable (the stage re-runs)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    keys = ("stage", "options", "inputs", "outputs")
    return record if isinstance(record, dict) and all(k in record for k in keys) else None


def input_changed(path: str, recorded: dict) -> bool:
    """Whether `path` is no longer the version `recorded` describes (gone, resized, or touched
    with other contents)."""
    if not os.path.isfile(path):
        return True
    stat = os.stat(path)
    if stat.st_size != recorded.get("bytes"):
        return True
    if stat.st_mtime_ns == recorded.get("mtime_ns"):
        return False
    return "sha1" not in recorded or sha1_of(path) != recorded["sha1"]


def output_damage(path: Path, recorded: dict) -> str | None:
    """Why `path` is not what its stage wrote, or None."""
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    if size != recorded.get("bytes"):
        return f"{size} bytes, the stage wrote {recorded.get('bytes')}"
    if "sha1" in recorded and sha1_of(path) != recorded["sha1"]:
        return f"sha1 differs from the one the stage wrote ({recorded['sha1'][:12]})"
    return None


def why_rerun(
    directory: str | os.PathLike,
    stage: str,
    options: object,
    inputs: Iterable[str | os.PathLike],
    name: str | None = None,
) -> str | None:
    """None when `directory` holds a complete record of `stage` made with these options from
    these inputs, unchanged since; else the reason to run the stage (one line, for the log)."""
    directory = Path(directory)
    path = record_path(directory, name or stage)
    record = read_record(path)
    if record is None:
        return f"{path}: no record of a finished {stage} stage"
    if record["options"] != _plain(options):
        changed = _changed_keys(record["options"], _plain(options))
        return f"{stage} options changed since {path} ({changed})"
    inputs = [_key(p) for p in inputs]
    if sorted(record["inputs"]) != sorted(inputs):
        return f"{stage} inputs changed since {path} (now {', '.join(inputs)})"
    for name in inputs:
        if input_changed(name, record["inputs"][name]):
            return f"{name} changed since the {stage} stage read it ({path})"
    for name, recorded in record["outputs"].items():
        damage = output_damage(directory / name, recorded)
        if damage is not None:
            return f"{directory / name}: {damage}"
    _note_used(path)
    return None


def _note_used(path: Path) -> None:
    used = os.environ.get(USED_RECORDS_ENV)
    if used:
        with open(used, "a", encoding="utf-8") as f:  # one short line: an append is one write
            f.write(os.path.abspath(path) + "\n")


def _changed_keys(old: object, new: object) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        return ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys)
    return f"{old!r} -> {new!r}"


def find_record(path: Path) -> tuple[Path, dict, str] | None:
    """The record listing `path`: (its directory, the record, `path`'s name in it)."""
    path = Path(os.path.abspath(path))
    for directory in path.parents[: LEVELS_UP + 1]:
        name = path.relative_to(directory).as_posix()
        for candidate in sorted(directory.glob(f"*{SUFFIX}")):
            record = read_record(candidate)
            if record is not None and name in record["outputs"]:
                return directory, record, name
    return None


def verify(path: str | os.PathLike, what: str = "file") -> None:
    """Refuse `path` (InputError, one line) when it is not what the stage that wrote it recorded."""
    path = Path(path)
    found = find_record(path)
    if found is None:
        return
    directory, record, name = found
    damage = output_damage(directory / name, record["outputs"][name])
    if damage is not None:
        rerun = record.get("rerun") or f"the {record['stage']} stage"
        raise InputError(
            f"{path}: damaged, truncated or replaced {what} ({damage}); re-run the {record['stage']} stage ({rerun})"
        )


def verify_table(scp: str | os.PathLike, what: str) -> None:
    """verify() a Kaldi script file and the archive beside it that it names (`x.scp`, `x.ark`)."""
    scp = Path(scp)
    verify(scp, what)
    if scp.with_suffix(".ark").is_file():
        verify(scp.with_suffix(".ark"), what)
