"""A set written in parts by worker processes, joined into one: the arks concatenated and the
tables merged in key order, streaming, so the process that joins them holds no line per
utterance.

A part writes `<name>.<i>.ark` + `<name>.<i>.scp` (matrices) and `<table>.<i>` (`key value`
lines). The parts write their lines in key order (the fMLLR parts speaker by speaker, the log-mel
parts in runs of a recording's consecutive utterances) and are merged as they stream; a part
written in another order is sorted in memory first.
"""

from __future__ import annotations

import heapq
import os
import shutil
from pathlib import Path
from typing import Iterable, Iterator

from asr.kaldi.table import c_sort_key, iter_table

COPY_CHUNK = 1 << 20  # bytes per read when concatenating arks: more only raises the peak memory


def join_parts(tmp: Path, out_dir: Path, num_parts: int, name: str = "feats") -> None:
    """Concatenate <name>.<i>.ark into <name>.ark and write one sorted <name>.scp pointing at it.

    An ark is a sequence of self-delimiting records, so concatenation is a valid ark; each
    part's offsets move by the bytes before it. The scp names the final (renamed) directory.
    """
    final_ark = str(out_dir.absolute() / f"{name}.ark")
    shifts = []
    with open(tmp / f"{name}.ark", "wb") as joined:
        for i in range(num_parts):
            shifts.append(joined.tell())
            part_ark = tmp / f"{name}.{i}.ark"
            with open(part_ark, "rb") as part:
                shutil.copyfileobj(part, joined, COPY_CHUNK)
            part_ark.unlink()
        joined.flush()
        os.fsync(joined.fileno())
    parts = [_moved(in_key_order(tmp / f"{name}.{i}.scp"), final_ark, shift) for i, shift in enumerate(shifts)]
    write_merged(tmp / f"{name}.scp", parts)
    for i in range(num_parts):
        (tmp / f"{name}.{i}.scp").unlink()


def merge_part_tables(tmp: Path, name: str, num_parts: int, also: Iterable[tuple[str, str]] = ()) -> int:
    """`<name>.<i>` (and the sorted rows `also`) into one sorted `<name>`; the parts are removed.
    Returns the number of lines written."""
    paths = [tmp / f"{name}.{i}" for i in range(num_parts)]
    lines = write_merged(tmp / name, [in_key_order(p) for p in paths] + [iter(also)])
    for path in paths:
        path.unlink()
    return lines


def merge_skipped(tmp: Path, num_parts: int, also: Iterable[tuple[str, str]] = ()) -> int:
    """The parts' `skipped.<i>` (and `also`) merged into `skipped`, which is left out when no
    utterance was skipped (its absence says so); returns its lines."""
    lines = merge_part_tables(tmp, "skipped", num_parts, also)
    if not lines:
        (tmp / "skipped").unlink()
    return lines


def in_key_order(path: Path) -> Iterator[tuple[str, str]]:
    """(key, value) rows of a part's table in C-locale key order."""
    if _is_sorted(path):
        return ((key, value) for _, key, value in iter_table(path))
    return iter(sorted(((key, value) for _, key, value in iter_table(path)), key=lambda row: c_sort_key(row[0])))


def write_merged(path: Path, parts: list[Iterator[tuple[str, str]]]) -> int:
    """The rows of sorted `parts` into one sorted table at `path`; returns the number of lines."""
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        for key, value in heapq.merge(*parts, key=lambda row: c_sort_key(row[0])):
            out.write(f"{key} {value}\n" if value != "" else f"{key}\n")
            count += 1
    return count


def _is_sorted(path: Path) -> bool:
    previous = b""
    for _, key, _ in iter_table(path):
        encoded = c_sort_key(key)
        if encoded < previous:
            return False
        previous = encoded
    return True


def _moved(rows: Iterator[tuple[str, str]], ark: str, shift: int) -> Iterator[tuple[str, str]]:
    """scp rows `key path:offset` renamed to `ark` with their offsets moved by `shift`."""
    for key, location in rows:
        yield key, f"{ark}:{int(location.rsplit(':', 1)[1]) + shift}"


def repoint_scp(scp: Path, ark: Path) -> None:
    """Make every `key path:offset` line of `scp` name `ark` (same offsets)."""
    lines = []
    for line in scp.read_text().splitlines():
        key, location = line.split(maxsplit=1)
        lines.append(f"{key} {ark}:{location.rsplit(':', 1)[1]}\n")
    scp.write_text("".join(lines))
