"""segments and utt2dur values: one parser, strict for a stage, a message for the validator and fixer."""

import math

import pytest

from asr.kaldi.segments import (
    Segment,
    parse_duration,
    parse_segment,
    positive_duration,
    read_segments,
    segment_problem,
    valid_segment,
)
from asr.utils.errors import InputError


@pytest.mark.parametrize(
    "value, problem",
    [
        ("sw02001-A 1.5 2.25", None),
        ("sw02001-A 2.25 1.5", "bad times for u: start 2.25 end 1.5 (need 0 <= start < end)"),
        ("sw02001-A -1 2", "bad times for u: start -1.0 end 2.0 (need 0 <= start < end)"),
        ("sw02001-A 1 inf", "bad times for u: start 1.0 end inf (need 0 <= start < end)"),
        ("sw02001-A 1 2 3", "bad times for u: start 1.0 end 2.0 (need 0 <= start < end)"),
        ("sw02001-A 1", "expected '<utt> <recording> <start> <end>', got u 'sw02001-A 1'"),
        ("sw02001-A one 2", "expected '<utt> <recording> <start> <end>', got u 'sw02001-A one 2'"),
    ],
)
def test_segment_lines_are_judged_once(tmp_path, value, problem):
    assert segment_problem("u", value) == problem
    assert (valid_segment("u", value) is None) == (problem is not None)
    if problem is None or problem.startswith("bad times"):  # a stage reads what it can parse
        fields = value.split()
        assert parse_segment(tmp_path, 3, "u", value) == Segment(fields[0], float(fields[1]), float(fields[2]))
    else:
        with pytest.raises(InputError, match=r":3: expected '<utt> <recording> <start> <end>'"):
            parse_segment(tmp_path, 3, "u", value)


def test_segments_file_and_its_durations(tmp_path):
    (tmp_path / "segments").write_text("u1 r 0.00 1.50\nu2 r 1.50 2.25\n")
    segments = read_segments(tmp_path / "segments")
    assert segments == {"u1": Segment("r", 0.0, 1.5), "u2": Segment("r", 1.5, 2.25)}
    assert [str(s) for s in segments.values()] == ["r 0.00 1.50", "r 1.50 2.25"]
    assert segments["u2"].duration == 0.75
    (tmp_path / "segments").write_text("u1 r 0 1\nu1 r 1 2\n")
    with pytest.raises(InputError, match=r"segments:2: duplicate utterance 'u1'"):
        read_segments(tmp_path / "segments")


def test_durations_strict_and_positive(tmp_path):
    assert parse_duration(tmp_path, 1, "u", "1.25") == 1.25
    with pytest.raises(InputError, match=r":4: expected '<utt> <seconds>', got u 'x'"):
        parse_duration(tmp_path, 4, "u", "x")
    assert [positive_duration(v) for v in ("1.25", "0", "-1", "inf", "x")] == [1.25, None, None, None, None]
    assert math.isnan(parse_duration(tmp_path, 1, "u", "nan"))  # strict takes any number, as before
