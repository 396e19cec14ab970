"""The one stm reader (asr/data/stm.py), used by the Hub5 preparation and by scoring alike:
NIST's rules where the two earlier parsers disagreed."""

import pytest

from asr.data.stm import fix_stm, parse_stm, read_stm
from asr.score.hub5.native import scoring_order
from asr.utils.errors import InputError


def test_stm_is_fixed_parsed_and_sorted_for_scoring():
    segments = scoring_order(
        parse_stm(
            fix_stm(
                ";; comment line\n"
                "sw_2 B sw_2_B 5.00 6.00 <O,sw,M> (( YEAH\n"
                "sw_2 A sw_2_A 3.00 4.00 <O,sw,F> <B_ASIDE> HELLO <E_ASIDE> THERE\n"
                "sw_2 A sw_2_A 1.00 2.00 IGNORE_TIME_SEGMENT_IN_SCORING\n"
            )
        )
    )
    assert [(s.channel, s.start) for s in segments] == [("A", 1.0), ("A", 3.0), ("B", 5.0)]
    assert segments[0].ignored and segments[0].label == "" and not segments[1].ignored
    assert segments[1].label == "<O,sw,F>" and segments[1].text == "HELLO THERE"
    assert segments[2].text == "( YEAH"  # '((' fixed to '(' as Kaldi does for hubscr.pl


def test_nist_rules_for_comments_and_labels():
    segments = parse_stm(
        "  ;; an indented comment\n"
        "en_1 A en_1_A 1.0 2.0 <O> OKAY ;; NOT A COMMENT\n"  # ';;' after the start is text
        "en_1 1 spk 2.0 3.0 <NOT A LABEL HI\n"  # a label is closed by '>'; channels are free text
    )
    assert [(s.label, s.text) for s in segments] == [("<O>", "OKAY ;; NOT A COMMENT"), ("", "<NOT A LABEL HI")]
    assert segments[1].channel == "1" and segments[0].where == "stm:2"


def test_bad_lines_and_missing_files_name_the_place(tmp_path):
    with pytest.raises(InputError, match="stm:1: expected"):
        parse_stm("sw_2 A spk one 2.0 hi\n")
    with pytest.raises(InputError, match="ref.stm:2: expected"):
        parse_stm("x A s 1 2 hi\nx A s 1\n", "ref.stm")
    with pytest.raises(InputError, match="stm not found"):
        read_stm(tmp_path / "missing.stm")
