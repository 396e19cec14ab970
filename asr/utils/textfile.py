"""Reading text input strictly as UTF-8, with the file and line of a bad byte.

Corpus transcripts, stm and GLM files and Kaldi tables are UTF-8 (the LDC releases are
ASCII). A byte that is not valid UTF-8 means the file is in another encoding or damaged;
replacing it silently would change a word, so it is an InputError naming the file, line and
column, never a traceback and never a U+FFFD in the output.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from asr.utils.errors import InputError

HINT = "convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8) or fix the damaged line"


def _bad_byte(path: str | os.PathLike, lineno: int, err: UnicodeDecodeError) -> InputError:
    byte = err.object[err.start]
    return InputError(f"{path}:{lineno}: not valid UTF-8 (byte 0x{byte:02x} at column {err.start + 1}); {HINT}")


def decode_line(data: bytes, path: str | os.PathLike, lineno: int) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _bad_byte(path, lineno, err) from None


def read_text(path: str | os.PathLike) -> str:
    """The whole file; InputError naming the line of the first byte that is not UTF-8."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        lineno = data.count(b"\n", 0, err.start) + 1
        line_start = data.rfind(b"\n", 0, err.start) + 1
        line = data[line_start : data.find(b"\n", err.start) if b"\n" in data[err.start :] else len(data)]
        raise _bad_byte(
            path, lineno, UnicodeDecodeError("utf-8", line, err.start - line_start, err.end - line_start, err.reason)
        ) from None


def iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """(line number, line without its newline, \n or \r\n) for each line, decoded as it is read."""
    with open(path, "rb") as f:
        for lineno, data in enumerate(f, 1):
            yield lineno, decode_line(data.rstrip(b"\n").rstrip(b"\r"), path, lineno)
