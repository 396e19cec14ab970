"""asr.utils.textfile: strict UTF-8 with the file, line and column of the first bad byte."""

from __future__ import annotations

import pytest

from asr.utils.errors import InputError
from asr.utils.textfile import iter_lines, read_text


def test_bad_byte_is_named_by_line_and_column(tmp_path):
    path = tmp_path / "text"
    path.write_bytes(b"utt1 hello\r\nutt2 caf\xe9 au lait\nutt3 ok\n")
    with pytest.raises(InputError, match=rf"^{path}:2: not valid UTF-8 \(byte 0xe9 at column 9\); convert it"):
        read_text(path)
    lines = iter_lines(path)
    assert next(lines) == (1, "utt1 hello")  # CRLF ends a line like LF
    with pytest.raises(InputError, match=rf"^{path}:2: not valid UTF-8 \(byte 0xe9 at column 9\)"):
        next(lines)


def test_valid_utf8_reads_unchanged(tmp_path):
    path = tmp_path / "text"
    path.write_text("utt1 naïve café\nutt2 ok", encoding="utf-8")
    assert read_text(path) == "utt1 naïve café\nutt2 ok"
    assert list(iter_lines(path)) == [(1, "utt1 naïve café"), (2, "utt2 ok")]
