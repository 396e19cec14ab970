"""The Hub5 input filters on crafted lines: CTM filtering, stm parsing and fixing, GLM rules
and csrfilt's text processing, sclite's transcript syntax, and reading sclite's pra report."""

from __future__ import annotations

import pytest

from asr.data.ctm import parse_ctm, read_ctm
from asr.score.hub5.align import align_networks
from asr.score.hub5.ctm import filter_ctm
from asr.score.hub5.glm import Glm, GlmRule, filter_text, parse_rule, read_glm, split_hyphens, spread_parentheses
from asr.score.hub5.network import parse_transcript
from asr.score.hub5.sctk import parse_pra, parse_sum
from asr.utils.errors import InputError
from tests.fixtures.hub5_cases import GLM


def test_ctm_filter_drops_tags_unk_hesitations_and_partial_words():
    ctm = parse_ctm(
        "sw_1 A 0.10 0.20 hello 0.9\n"
        "sw_1 A 0.30 0.10 [noise] 0.5\n"
        "sw_1 A 0.40 0.10 [LAUGHTER] 0.5\n"
        "sw_1 A 0.50 0.10 <unk> 0.5\n"
        "sw_1 A 0.60 0.10 uh 0.5\n"
        "sw_1 A 0.70 0.10 UM 0.5\n"
        "sw_1 A 0.80 0.10 ab- 0.5\n"
        "sw_1 A 0.90 0.10 mmm 0.5\n"  # not a Kaldi filler: the GLM maps it
        "sw_1 A 1.00 0.10 uh-huh 0.5\n"  # a word, not a hesitation
        "sw_1 A 1.10 0.10 oh\n"
    )
    assert [w.word for w in filter_ctm(ctm)] == ["hello", "mmm", "uh-huh", "oh"]
    assert str(ctm[0]) == "sw_1 A 0.10 0.20 hello 0.90" and ctm[-1].confidence is None


def test_ctm_errors_name_the_file_and_line(tmp_path):
    bad = tmp_path / "hyp.ctm"
    bad.write_text("sw_1 A 0.1 0.2 hello 0.9\nsw_1 A zero 0.2 x\n")
    with pytest.raises(InputError, match=r"hyp.ctm:2: expected"):
        read_ctm(bad)
    empty = tmp_path / "empty.ctm"
    empty.write_text("")
    with pytest.raises(InputError, match="no words"):
        read_ctm(empty)
    with pytest.raises(InputError, match="not found; run the decode stage"):
        read_ctm(tmp_path / "missing.ctm")


def test_glm_rules_parse_with_brackets_comments_and_alternations(tmp_path):
    assert parse_rule("[DON'T] => [{DON'T / DO NOT}] / [ ] __ [ ] ;; contraction", "g") == (
        ("DON'T",),
        "{DON'T / DO NOT}",
    )
    assert parse_rule("all right => {ALL RIGHT / ALRIGHT} / [ ] __ [ ]", "g") == (
        ("ALL", "RIGHT"),
        "{ALL RIGHT / ALRIGHT}",
    )
    with pytest.raises(InputError, match="not supported by the native scorer"):
        parse_rule("A => B / C __ [ ]", "g:3")
    with pytest.raises(InputError, match="not a GLM rule"):
        parse_rule("A B C", "g:4")
    path = tmp_path / "t.glm"
    path.write_text(GLM + ';; INPUT_DEPENDENT_APPLICATION = "ctm"\nYEP => YES / [ ] __ [ ]\n')
    glm = read_glm(path)
    assert len(glm.rules) == 10 and glm.rules[-1].applies_to == "ctm"
    assert glm.for_input("ctm", "hyp").map_words(["YEP"]) == ["YES"]
    assert glm.for_input("stm", "ref").map_words(["YEP"]) == ["YEP"]
    with pytest.raises(InputError, match="GLM not found"):
        read_glm(tmp_path / "missing.glm")


def test_rules_longest_first_left_to_right_without_rescanning():
    glm = Glm(
        (
            GlmRule(("A", "B"), "AB", None),
            GlmRule(("B", "C"), "BC", None),
            GlmRule(("OK",), "OKAY", None),
            GlmRule(("OKAY",), "FINE", None),
        )
    )
    mapper = glm.for_input("stm", "ref")
    assert mapper.map_words("A B C".split()) == ["AB", "C"]  # as SCTK's rfilter1 does
    assert mapper.map_words("X B C".split()) == ["X", "BC"]
    assert mapper.map_words("OK OKAY".split()) == ["OKAY", "FINE"]


def test_csrfilt_processing_of_reference_text(tmp_path):
    (tmp_path / "g").write_text(GLM)
    mapper = read_glm(tmp_path / "g").for_input("stm", "ref")
    assert filter_text("hold on (uh) right", mapper) == "HOLD ON (%HESITATION) RIGHT"
    assert filter_text("I don't know ok", mapper) == "I {DON'T / DO NOT} KNOW OKAY"
    assert filter_text("(AB-) a-b mm-hmm -solute", mapper) == "(AB-) A B UM HUM -SOLUTE"
    assert filter_text("( she is ) ok", mapper) == "(SHE) (IS) OKAY"
    assert split_hyphens(" UH-HUH AB- (AB-) ") == " UH HUH AB- (AB-) "
    assert spread_parentheses(" ( A B C ) D ") == " ( A ) ( B ) ( C ) D "


def test_transcript_networks_align_with_optional_words_and_alternations():
    cost, columns = align_networks(parse_transcript("A (UH) {DON'T / DO NOT} @ B"), parse_transcript("A DO NOT B"))
    assert cost == 2  # only the optional UH is skipped (sclite -D: counted correct)
    assert [(c.op, c.ref, c.hyp) for c in columns] == [
        ("C", "A", "A"),
        ("C", "UH", None),
        ("C", "DO", "DO"),
        ("C", "NOT", "NOT"),
        ("C", "B", "B"),
    ]
    with pytest.raises(InputError, match="closing brace"):
        parse_transcript("{A / B")


PRA = """Speaker sentences   0:  sw_1_a   #utts: 2
id: (sw_1_a-000)
Labels: <o,sw,m>
File: sw_1
Channel: a
Scores: (#C #S #D #I) 3 1 0 1
REF:  a * (%HESITATION) b (uh)\x20
HYP:  a X Y             b     \x20
Eval:   I S                   \x20

id: (sw_1_a-001)
Labels: <o,sw,m>
Scores: (#C #S #D #I) 0 0 1 0
REF:  GONE\x20
HYP:  ****\x20
Eval: D   \x20
"""


def test_sclite_pra_report_is_read_column_by_column():
    first, second = parse_pra(PRA, "x.pra")
    assert first.utt == "sw_1_a-000" and first.speaker == "sw_1_a"
    assert [(c.op, c.ref, c.hyp) for c in first.words] == [
        ("C", "a", "a"),
        ("I", None, "x"),
        ("S", "%hesitation", "y"),
        ("C", "b", "b"),
        ("C", "uh", None),
    ]
    assert (second.counts.deletions, second.words[0].hyp) == (1, None)
    with pytest.raises(InputError, match="could not read"):
        parse_pra(PRA.replace("3 1 0 1", "2 1 0 1"), "x.pra")
    raw = "| SPKR | # Snt # Wrd | Corr Sub Del Ins Err S.Err |\n| Sum  |  2  6 | 3 1 1 1 3 2 |\n"
    assert parse_sum(raw, "x.raw").words == 5 and parse_sum(raw, "x.raw").sentences == 2
