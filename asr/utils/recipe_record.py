"""The record run.sh keeps of each stage, `exp/<name>/.done/<N>.<stage>.record.json`: the stage
record (asr/utils/record.py) of a whole `run_stage` line, so that run.sh skips a stage by the
same rule as the stage itself.

    options  the stage's option words (run.sh's `stage_options`), sorted
    inputs   the inputs named by the records the stage wrote while it ran (`sources`), with
             the identity those records hold, less what the stage made itself (a set's record
             names its model's record, both written by the features stage); a command that
             writes no stage record naming an input (synth reads nothing; a stand-in in the
             tests) takes the run.sh records of the stages before it as its inputs instead, so
             it runs again when any of them ran again
    outputs  every file those records list, by size (the readers check sha1s with verify())
    sources  the records the stage wrote, those it found up to date (a stage that skipped its
             work by its own record: why_rerun notes them in --used), and those of its previous
             run still there (a stage that redoes one set of three keeps the other two)

A stage is done when its options are the same, no input changed, every output is there
with its size and every one of its sources is still there. Stdlib only, so that run.sh's
check starts in a few tens of milliseconds:

    python -m asr.utils.recipe_record check RECORD < OPTIONS
        exit 0: done; exit 1: the changes, one indented line each, on stdout
    python -m asr.utils.recipe_record snapshot RECORD [--root DIR]... [--exp DIR]
        before the stage runs: the stage records there now and their mtimes, in RECORD.snapshot
    python -m asr.utils.recipe_record write RECORD [--root DIR]... [--exp DIR] [--previous OLD]
                                           [--used FILE] [--after RECORD]... < OPTIONS
        after it succeeded: the records that are new or changed since the snapshot are its own
        (a comparison of mtimes with mtimes, so a node whose clock differs does not matter)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Iterable

from asr.utils.atomic import write_text
from asr.utils.record import SUFFIX, input_changed, input_identity, output_damage, read_record, save_record

STAGE = "run.sh"
# Directories never searched for a stage's records: run.sh's own, and a training's earlier runs.
SKIPPED_DIRS = {".done", "previous"}
# What marks an experiment's directory (run.sh's lock): another experiment's records are not
# this stage's, even when that experiment runs at the same time.
EXPERIMENT_MARK = ".run.lock"


def option_changes(recorded: list[str], options: list[str]) -> list[str]:
    """The option words removed (-) and added (+) since the record was written."""
    removed = [f"  - {o}" for o in recorded if o not in options]
    return removed + [f"  + {o}" for o in options if o not in recorded]


def changes(record_file: Path, options: list[str]) -> list[str]:
    """Why the stage recorded in `record_file` must run again; empty when it is done."""
    record = read_record(record_file)
    if record is None:
        return [f"  no record {record_file}"]
    found = option_changes(record["options"], options)
    found += [f"  input {path}" for path, identity in record["inputs"].items() if input_changed(path, identity)]
    for path, identity in record["outputs"].items():
        damage = output_damage(Path(path), identity)
        if damage is not None:
            found.append(f"  output {path}: {damage}")
    # a stage record gone with what it described (a data dir removed takes prepare's with it)
    found += [f"  record {source}: missing" for source in record.get("sources", []) if not os.path.isfile(source)]
    return found


def stage_records(roots: Iterable[str], own_exp: str | None) -> dict[str, int]:
    """{path: mtime_ns} of the stage records under `roots` (symbolic links followed), other
    experiments' directories left out."""
    found = {}
    own = os.path.abspath(own_exp) if own_exp else None
    for root in roots:
        for directory, dirs, files in os.walk(root, followlinks=True):
            if EXPERIMENT_MARK in files and os.path.abspath(directory) != own:
                dirs[:] = []
                continue
            dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
            for name in files:
                if name.endswith(SUFFIX):
                    path = os.path.abspath(os.path.join(directory, name))
                    found[path] = os.stat(path).st_mtime_ns
    return found


def stage_record(options: list[str], sources: list[Path], after: list[str]) -> dict:
    """The record of a finished stage from the records it wrote (see the module's docstring)."""
    inputs, outputs = {}, {}
    for source in sources:
        record = read_record(source)
        for name in record["outputs"]:
            path = os.path.abspath(source.parent / name)
            if os.path.isfile(path):
                outputs[path] = {"bytes": os.stat(path).st_size}
        inputs.update(record["inputs"])
    # what the stage made itself (an output, or one of its records that another of them names) is no input
    own = outputs.keys() | {str(s) for s in sources}
    inputs = {path: identity for path, identity in inputs.items() if path not in own and os.path.isfile(path)}
    if not inputs:
        inputs = {os.path.abspath(p): input_identity(p) for p in after if os.path.isfile(p)}
    return {
        "stage": STAGE,
        "rerun": "run.sh --force",
        # when: a stage that ran again changes its record, so the stages that take it as input follow
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "options": options,
        "inputs": inputs,
        "outputs": outputs,
        "sources": [str(s) for s in sources],
    }


def snapshot_path(record_file: Path) -> Path:
    return record_file.with_name(record_file.name + ".snapshot")


def sources_of(now: dict[str, int], before: dict[str, int], previous: Path | None, used: list[Path]) -> list[Path]:
    """The records the stage wrote (new or changed since the snapshot `before`), those it found
    up to date, and those of its previous run still there."""
    found = dict.fromkeys(Path(path) for path, mtime in now.items() if before.get(path) != mtime)
    found.update(dict.fromkeys(used))
    old = read_record(previous) if previous else None
    for source in (old or {}).get("sources", []):
        found.setdefault(Path(source))
    return [path for path in found if read_record(path) is not None]


def read_used(path: Path | None) -> list[Path]:
    """The records why_rerun found up to date while the stage ran (none without the file)."""
    try:
        return [Path(line) for line in path.read_text(encoding="utf-8").splitlines() if line] if path else []
    except OSError:
        return []


def read_snapshot(path: Path) -> dict[str, int]:
    """The snapshot taken before the stage ran; none (every record counts as new) when missing."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.utils.recipe_record", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("check", "snapshot", "write"))
    parser.add_argument("record", type=Path)
    parser.add_argument("--root", action="append", default=[], help="where the stage's records may be")
    parser.add_argument("--exp", help="this experiment's directory (other experiments' are left out)")
    parser.add_argument("--previous", type=Path, help="the stage's record from its previous run")
    parser.add_argument("--used", type=Path, help="the records the stage found up to date, one a line")
    parser.add_argument("--after", action="append", default=[], help="a record of an earlier stage")
    args = parser.parse_args(argv)
    roots = args.root or ["."]
    if args.action == "snapshot":
        write_text(snapshot_path(args.record), json.dumps(stage_records(roots, args.exp)))
        return 0
    options = sorted(line for line in sys.stdin.read().splitlines() if line)
    if args.action == "check":
        found = changes(args.record, options)
        if found:
            print("\n".join(found))
        return 1 if found else 0
    snapshot = snapshot_path(args.record)
    sources = sources_of(stage_records(roots, args.exp), read_snapshot(snapshot), args.previous, read_used(args.used))
    save_record(args.record, stage_record(options, sources, args.after))
    snapshot.unlink(missing_ok=True)
    if args.used:
        args.used.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
