"""The native Hub5 scorer against NIST SCTK on crafted cases: hesitations, contractions,
case, optional words, fragments, alternations, hyphens, IGNORE_TIME_SEGMENT_IN_SCORING and
words between segments. Expected counts were recorded from SCTK; where SCTK is installed
it is also run live on the same files."""

from __future__ import annotations

import pytest

from asr.data.ctm import CtmWord
from asr.data.stm import fix_stm, parse_stm
from asr.score.hub5.glm import read_glm
from asr.score.hub5.native import score_native, scoring_order
from asr.score.hub5.sctk import find_sctk, score_sctk
from tests.fixtures.hub5_cases import BETWEEN, CASES, GLM, IGNORED, STM_HEADER

SPEAKER = "sw_1_A"


def _segment(t0: float, text: str) -> str:
    return f"sw_1 A {SPEAKER} {t0:.2f} {t0 + 9:.2f} <O,sw,M> {text}\n"


def _words(t0: float, hyp: str) -> list[CtmWord]:
    return [CtmWord("sw_1", "A", round(t0 + 0.5 + 0.5 * j, 2), 0.3, w, 0.9) for j, w in enumerate(hyp.split())]


def crafted_inputs() -> tuple[str, list[CtmWord], list[tuple[int, int, int, int]]]:
    """stm text, CTM words and the expected counts per scored segment (in time order)."""
    stm, words, expected = STM_HEADER, [], []
    for i, (ref, hyp, counts) in enumerate(CASES):
        stm += _segment(10 * i, ref)
        words += _words(10 * i, hyp)
        expected.append(counts)
    n = len(CASES)
    stm += _segment(10 * n, IGNORED[0])
    words += _words(10 * n, IGNORED[1])
    last = 10 * (n + 2)
    stm += _segment(last, BETWEEN[0])
    between, good, bye, after = BETWEEN[1].split()
    words += [
        CtmWord("sw_1", "A", 10 * n + 14, 0.3, between, 0.9),
        CtmWord("sw_1", "A", last + 1, 0.3, good, 0.9),
        CtmWord("sw_1", "A", last + 2, 0.3, bye, 0.9),
        CtmWord("sw_1", "A", last + 12, 0.3, after, 0.9),
    ]
    expected.append(BETWEEN[2])
    return stm, words, expected


def _counts(result) -> list[tuple[int, int, int, int]]:
    return [
        (u.counts.correct, u.counts.substitutions, u.counts.deletions, u.counts.insertions) for u in result.utterances
    ]


def test_native_scorer_gives_sctks_counts(tmp_path):
    stm, words, expected = crafted_inputs()
    (tmp_path / "glm").write_text(GLM)
    result = score_native(scoring_order(parse_stm(fix_stm(stm))), words, read_glm(tmp_path / "glm"))
    got = _counts(result)
    assert len(got) == len(expected)  # the ignored segment is not scored
    for (ref, hyp, _), want, have in zip(CASES + [BETWEEN], expected, got):
        assert have == want, f"{ref!r} | {hyp!r}"
    total = result.subsets["total"]
    assert total.sentences == len(expected)
    assert total.insertions == sum(c[3] for c in expected)  # 'junk' in the ignored segment is not one


@pytest.mark.skipif(find_sctk() is None, reason="NIST SCTK not installed (Debian package sctk)")
def test_sctk_agrees_live(tmp_path):
    stm, words, expected = crafted_inputs()
    result = score_sctk(find_sctk(), tmp_path / "sctk", stm, [str(w) for w in words], GLM)
    assert _counts(result) == expected
    native = score_native(scoring_order(parse_stm(fix_stm(stm))), words, read_glm(tmp_path / "sctk" / "glm"))
    assert native.subsets == result.subsets
    assert [u.utt for u in native.utterances] == [u.utt for u in result.utterances]  # sclite's ids
