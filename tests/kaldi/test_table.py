"""Kaldi text tables: the one reader, strict for the stages and lenient (a callback per bad line)
for the validator and the fixer."""

import pytest

from asr.kaldi.table import Lookup, Row, iter_table, read_table, sorted_table, write_table
from asr.utils.errors import InputError

CLEAN = b"utt1 a b\nutt2 c\nutt3\n"
# Each line a different defect, as a user's editor or a script leaves them.
DAMAGED = b"utt1 a\n\nutt2 b\r\n  utt3 c\nutt4 \xff\nutt5 d"


def lenient(path):
    reported = []
    rows = list(iter_table(path, on_bad_line=lambda line, message: reported.append((line, message))))
    return rows, reported


def test_both_modes_read_a_clean_table_alike(tmp_path):
    (tmp_path / "t").write_bytes(CLEAN)
    expected = [Row(1, "utt1", "a b"), Row(2, "utt2", "c"), Row(3, "utt3", "")]
    assert list(iter_table(tmp_path / "t")) == expected
    assert lenient(tmp_path / "t") == (expected, [])
    assert [(line, key, value) for line, key, value in iter_table(tmp_path / "t")] == expected  # rows unpack


def test_the_lenient_mode_reports_each_bad_line_and_goes_on(tmp_path):
    (tmp_path / "t").write_bytes(DAMAGED)
    rows, reported = lenient(tmp_path / "t")
    assert rows == [Row(1, "utt1", "a"), Row(3, "utt2", "b"), Row(4, "utt3", "c"), Row(6, "utt5", "d")]
    assert reported == [
        (2, "empty line; each line must be 'key value'"),
        (3, "Windows line ending (\\r); convert the file with dos2unix"),
        (4, "line starts with white space; the key must come first"),
        (5, "not valid UTF-8"),
        (6, "last line does not end with a newline"),
    ]


def test_the_lenient_mode_reports_an_empty_file_once_without_a_line(tmp_path):
    (tmp_path / "t").write_bytes(b"")
    assert lenient(tmp_path / "t") == ([], [(None, "empty file; a data dir table needs at least one line")])
    assert list(iter_table(tmp_path / "t")) == []  # strict: no lines is no rows


@pytest.mark.parametrize(
    "data, message",
    [
        (b"utt1 a\n\nutt2 b\n", r"t:2: empty line; Kaldi tables have one 'key value' per line"),
        (b"utt1 a\nutt2 \xff\n", r"t:2"),
    ],
)
def test_the_strict_mode_stops_at_the_first_bad_line_naming_it(tmp_path, data, message):
    (tmp_path / "t").write_bytes(data)
    with pytest.raises(InputError, match=message):
        list(iter_table(tmp_path / "t"))


def test_the_strict_mode_takes_what_kaldi_takes(tmp_path):
    """A CR, leading white space or no final newline do not stop a stage (Kaldi reads them too)."""
    (tmp_path / "t").write_bytes(b"utt1 a\r\n  utt2 b\nutt3 c")
    assert list(iter_table(tmp_path / "t")) == [Row(1, "utt1", "a"), Row(2, "utt2", "b"), Row(3, "utt3", "c")]


def test_sorted_tables_and_lookups(tmp_path):
    write_table(tmp_path / "t", {"b": "2", "B": "1", "a_": "3", "a-": "4"})
    assert (tmp_path / "t").read_text() == "B 1\na- 4\na_ 3\nb 2\n"  # C locale: bytes
    assert [row.key for row in sorted_table(tmp_path / "t")] == ["B", "a-", "a_", "b"]
    lookup = Lookup(tmp_path / "t")
    assert [lookup.get(key) for key in ("A", "a-", "a0", "b", "c")] == [None, "4", None, "2", None]
    (tmp_path / "u").write_text("b 1\na 2\n")
    with pytest.raises(InputError, match=r"u:2: key 'a' out of order"):
        list(sorted_table(tmp_path / "u"))


def test_read_table_refuses_repeats_and_missing_values(tmp_path):
    (tmp_path / "t").write_text("a 1\na 2\n")
    with pytest.raises(InputError, match=r"t:2: duplicate key 'a'"):
        read_table(tmp_path / "t")
    (tmp_path / "t").write_text("a 1\nb\n")
    with pytest.raises(InputError, match=r"t:2: key 'b' has no value"):
        read_table(tmp_path / "t")
    assert read_table(tmp_path / "t", allow_empty_value=True) == {"a": "1", "b": ""}
