"""The record run.sh keeps of each stage, `exp/<name>/.done/<N>.<stage>.record.json`: the stage
record (asr/utils/record.py) of a whole `run_stage` line, so that run.sh skips a stage by the
same rule as the stage itself.

    options  the stage's option words (run.sh's `stage_options`), sorted
    inputs   the inputs named by the records the stage wrote while it ran (`sources`), with
             the identity those records hold; a stage whose records name no input (synth,
             prepare, decode, score, stand-ins) takes the run.sh records of the stages before
             it as its inputs instead, so it runs again when any of them ran again
    outputs  every file those records list, by size (the readers check sha1s with verify())
    sources  the records the stage wrote, and those of its previous run still there (a stage
             that redoes one set of three keeps the other two on its record)

A stage is done when its options are the same, no input changed and every output is there
with its size. Stdlib only, so that run.sh's check starts in a few tens of milliseconds:

    python -m asr.utils.recipe_record check RECORD < OPTIONS
        exit 0: done; exit 1: the changes, one indented line each, on stdout
    python -m asr.utils.recipe_record write RECORD --since FILE [--root DIR]... [--previous OLD]
                                           [--after RECORD]... < OPTIONS
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Iterable, Iterator

from asr.utils.record import SUFFIX, input_changed, input_identity, output_damage, read_record, save_record

STAGE = "run.sh"
# Directories never searched for a stage's records: run.sh's own, and a training's earlier runs.
SKIPPED_DIRS = {".done", "previous"}


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
    return found


def records_written_since(roots: Iterable[str], since_ns: int) -> Iterator[Path]:
    """The stage records under `roots` (symbolic links followed) written at or after `since_ns`."""
    for root in roots:
        for directory, dirs, files in os.walk(root, followlinks=True):
            dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
            for name in files:
                path = Path(directory, name)
                if name.endswith(SUFFIX) and path.stat().st_mtime_ns >= since_ns:
                    yield Path(os.path.abspath(path))


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
    inputs = {path: identity for path, identity in inputs.items() if path not in outputs and os.path.isfile(path)}
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


def sources_of(since_file: Path, roots: list[str], previous: Path | None) -> list[Path]:
    """The records the stage wrote since `since_file` was made, and the previous run's still there."""
    found = dict.fromkeys(records_written_since(roots, since_file.stat().st_mtime_ns))
    old = read_record(previous) if previous else None
    for source in (old or {}).get("sources", []):
        found.setdefault(Path(source))
    return [path for path in found if read_record(path) is not None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.utils.recipe_record", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("check", "write"))
    parser.add_argument("record", type=Path)
    parser.add_argument("--since", type=Path, help="a file made just before the stage started")
    parser.add_argument("--root", action="append", default=[], help="where the stage's records may be")
    parser.add_argument("--previous", type=Path, help="the stage's record from its previous run")
    parser.add_argument("--after", action="append", default=[], help="a record of an earlier stage")
    args = parser.parse_args(argv)
    options = sorted(line for line in sys.stdin.read().splitlines() if line)
    if args.action == "check":
        found = changes(args.record, options)
        if found:
            print("\n".join(found))
        return 1 if found else 0
    if args.since is None:
        parser.error("write needs --since")
    sources = sources_of(args.since, args.root or ["."], args.previous)
    save_record(args.record, stage_record(options, sources, args.after))
    return 0


if __name__ == "__main__":
    sys.exit(main())
