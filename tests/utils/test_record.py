"""The stage record (asr/utils/record.py): skip-if-done and the reader's check."""

from __future__ import annotations

import json
import os

import pytest

from asr.utils.errors import InputError
from asr.utils.record import add_outputs, record_path, verify, why_rerun, write_record


@pytest.fixture
def stage(tmp_path):
    """A stage that read `in.txt` and wrote `out/model` (checksummed) and `out/sub/big.ark`."""
    source = tmp_path / "in.txt"
    source.write_text("hello\n")
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "model").write_bytes(b"model bytes")
    (out / "sub" / "big.ark").write_bytes(b"x" * 100)
    write_record(out, "demo", "python -m demo", {"size": 3}, [source], {"model": True, "sub/big.ark": False})
    return source, out


def test_a_matching_record_is_done(stage):
    source, out = stage
    assert why_rerun(out, "demo", {"size": 3}, [source]) is None


def test_an_option_change_names_the_option(stage):
    source, out = stage
    assert "size: 3 -> 4" in why_rerun(out, "demo", {"size": 4}, [source])


def test_an_edited_input_reruns_a_touched_one_does_not(stage):
    source, out = stage
    os.utime(source, ns=(1, 1))
    assert why_rerun(out, "demo", {"size": 3}, [source]) is None
    source.write_text("hellO\n")
    assert why_rerun(out, "demo", {"size": 3}, [source]).startswith(f"{source} changed since the demo stage")


def test_a_missing_or_unreadable_record_reruns(stage):
    source, out = stage
    record_path(out, "demo").write_text("{")
    assert "no record of a finished demo stage" in why_rerun(out, "demo", {"size": 3}, [source])
    assert "no record" in why_rerun(out / "sub", "demo", {"size": 3}, [source])


def test_a_damaged_output_reruns(stage):
    source, out = stage
    (out / "sub" / "big.ark").write_bytes(b"x" * 50)
    assert why_rerun(out, "demo", {"size": 3}, [source]) == f"{out / 'sub' / 'big.ark'}: 50 bytes, the stage wrote 100"


def test_verify_refuses_a_truncated_file_in_one_line(stage):
    _, out = stage
    (out / "sub" / "big.ark").write_bytes(b"x" * 99)
    with pytest.raises(InputError) as err:
        verify(out / "sub" / "big.ark", "archive")
    message = str(err.value)
    assert message.startswith(f"{out / 'sub' / 'big.ark'}: damaged, truncated or replaced archive (99 bytes")
    assert message.endswith("re-run the demo stage (python -m demo)") and "\n" not in message


def test_verify_refuses_a_swapped_file_of_the_same_size(stage):
    _, out = stage
    (out / "model").write_bytes(b"MODEL BYTES")
    with pytest.raises(InputError, match="sha1 differs"):
        verify(out / "model")
    verify(out / "sub" / "big.ark")  # untouched: passes


def test_verify_reads_an_unrecorded_file_unchecked(tmp_path):
    (tmp_path / "loose").write_bytes(b"")
    verify(tmp_path / "loose")


def test_add_outputs_keeps_existing_entries_and_drops_deleted_files(tmp_path):
    for name in ("a.pt", "b.pt"):
        (tmp_path / name).write_bytes(name.encode())
        add_outputs(tmp_path, "train", "python -m asr.train", {name: True})
    (tmp_path / "a.pt").unlink()
    (tmp_path / "c.pt").write_bytes(b"c")
    add_outputs(tmp_path, "train", "python -m asr.train", {"c.pt": True})
    assert sorted(json.loads(record_path(tmp_path, "train").read_text())["outputs"]) == ["b.pt", "c.pt"]
