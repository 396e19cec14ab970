"""Kaldi's text tables: `key value...` lines sorted by key in C locale (byte order), one key a line.

One reader, `iter_table`, for every table of a data dir (and any other `key value` file). It is
strict by default: a blank line or bytes that are not UTF-8 are an InputError naming the file and
line, as a stage needs. Given `on_bad_line` it is lenient, for the validator and the fixer: each
format problem goes to the callback with its line number, and reading goes on.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from asr.utils.errors import InputError
from asr.utils.textfile import decode_line

# A format problem of one line (None: of the whole file) and what is wrong with it.
BadLine = Callable[["int | None", str], None]


class Row(NamedTuple):
    line: int
    key: str
    value: str


_new = tuple.__new__  # a Row without NamedTuple's __new__ (a Python call): a third less time per line


def c_sort_key(key: str) -> bytes:
    """Kaldi sorts with LC_ALL=C: by bytes, so 'B' < 'a' and '-' < '_'."""
    return key.encode("utf-8")


def sorted_items(table: dict[str, str]) -> list[tuple[str, str]]:
    return sorted(table.items(), key=lambda kv: c_sort_key(kv[0]))


def iter_table(path: str | os.PathLike, on_bad_line: BadLine | None = None) -> Iterator[Row]:
    """Yield a Row (line number, key, rest) for each line of a Kaldi table file, one line at a time.

    Strict without `on_bad_line`: blank lines and bytes that are not UTF-8 raise InputError naming
    file and line. Lenient with it: encoding, blank-line and newline problems are reported to
    `on_bad_line(line, message)` (line None for an empty file) and the line skipped or kept.
    """
    return _strict_rows(Path(path)) if on_bad_line is None else _lenient_rows(Path(path), on_bad_line)


def _strict_rows(path: Path) -> Iterator[Row]:
    with open(path, "rb") as f:
        for lineno, data in enumerate(f, 1):
            try:
                parts = data.decode("utf-8").split(maxsplit=1)
            except UnicodeDecodeError:
                decode_line(data.rstrip(b"\n").rstrip(b"\r"), path, lineno)  # raises, naming the line and column
                raise
            if not parts:
                raise InputError(f"{path}:{lineno}: empty line; Kaldi tables have one 'key value' per line")
            yield _new(Row, (lineno, parts[0], parts[1].strip() if len(parts) > 1 else ""))


def _lenient_rows(path: Path, on_bad_line: BadLine) -> Iterator[Row]:
    lineno = 0
    with open(path, "rb") as lines:
        for lineno, data in enumerate(lines, 1):
            row = _usual_row(lineno, data) or _lenient_row(lineno, data, on_bad_line)
            if row is not None:
                yield row
    if lineno == 0:
        on_bad_line(None, "empty file; a data dir table needs at least one line")


def _usual_row(lineno: int, data: bytes) -> Row | None:
    """A line that _lenient_row would find nothing wrong with (most lines), split quickly; else None."""
    if not (b"!" <= data[:1] <= b"~" and data.endswith(b"\n") and not data.endswith(b"\r\n")):
        return None
    try:
        parts = data.decode("utf-8").split(maxsplit=1)
    except UnicodeDecodeError:
        return None
    return _new(Row, (lineno, parts[0], parts[1].strip() if len(parts) > 1 else ""))


def _lenient_row(lineno: int, data: bytes, on_bad_line: BadLine) -> Row | None:
    if data.endswith(b"\n"):
        data = data[:-1]
    else:
        on_bad_line(lineno, "last line does not end with a newline")
    try:
        line = data.decode("utf-8")
    except UnicodeDecodeError:
        on_bad_line(lineno, "not valid UTF-8")
        return None
    if line.endswith("\r"):
        on_bad_line(lineno, "Windows line ending (\\r); convert the file with dos2unix")
        line = line.rstrip("\r")
    if not line.strip():
        on_bad_line(lineno, "empty line; each line must be 'key value'")
        return None
    if line[0].isspace():
        on_bad_line(lineno, "line starts with white space; the key must come first")
    parts = line.split(maxsplit=1)
    return Row(lineno, parts[0], parts[1].strip() if len(parts) > 1 else "")


def sorted_table(path: str | os.PathLike) -> Iterator[Row]:
    """iter_table, checking the C-locale order the streaming pass relies on (UTF-8's byte
    order, which is the order of code points, so str comparison is that order)."""
    previous = ""
    for row in iter_table(path):
        if row.key <= previous:
            raise InputError(
                f"{path}:{row.line}: key {row.key!r} out of order (or repeated); Kaldi tables are sorted by key "
                "in the C locale: run python -m asr.data.fix on the data dir, or re-run the features stage"
            )
        previous = row.key
        yield row


class Lookup:
    """Values of a sorted table, looked up in increasing key order (a merge join)."""

    def __init__(self, path: str | os.PathLike):
        self.path = path = Path(path)
        self.rows = sorted_table(path) if path.is_file() else iter(())
        self.key, self.value = "", ""
        self.lineno = 0  # of the row last read, for errors naming it

    def get(self, key: str) -> str | None:
        while self.key < key:
            row = next(self.rows, None)
            if row is None:
                self.key = "\U0010ffff" * 8  # after every key
                return None
            self.lineno, self.key, self.value = row
        return self.value if self.key == key else None


def read_table(path: str | os.PathLike, allow_empty_value: bool = False) -> dict[str, str]:
    """Read a `key value` file into a dict; duplicate keys and missing values are errors."""
    table: dict[str, str] = {}
    for lineno, key, value in iter_table(path):
        if key in table:
            raise InputError(f"{path}:{lineno}: duplicate key {key!r}; each key must appear once")
        if not value and not allow_empty_value:
            raise InputError(f"{path}:{lineno}: key {key!r} has no value")
        table[key] = value
    return table


def write_table(path: str | os.PathLike, table: dict[str, str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for key, value in sorted_items(table):
            f.write(f"{key} {value}\n" if value != "" else f"{key}\n")
