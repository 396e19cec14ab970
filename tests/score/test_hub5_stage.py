"""`score.kind=hub5` through the stage: SCTK and native give the same reports, and every
missing input (SCTK, GLM, stm, hypotheses) gives a clear error; only a missing SCTK falls back
(to the native scorer of the same metric), with a warning."""

from __future__ import annotations

import json
import logging

import pytest

from asr.config import load_config
from asr.score.hub5 import scorer as hub5_scorer
from asr.score.hub5.sctk import find_sctk
from asr.score.stage import score_set
from asr.utils.errors import InputError
from tests.fixtures.hub5_cases import GLM, STM_HEADER

STM = STM_HEADER + (
    "en_4001 A en_4001_A 0.00 3.00 <O,en,F> I DON'T KNOW (%HESITATION)\n"
    "en_4001 A en_4001_A 4.00 6.00 <O,en,F> IGNORE_TIME_SEGMENT_IN_SCORING\n"
    "sw_4002 B sw_4002_B 0.00 2.00 <O,sw,M> OK THEN\n"
)
CTM = (
    "en_4001 A 0.20 0.20 i 0.9\n"
    "en_4001 A 0.50 0.20 do 0.9\n"
    "en_4001 A 0.80 0.20 not 0.9\n"
    "en_4001 A 1.10 0.20 know 0.9\n"
    "en_4001 A 1.40 0.20 uh 0.9\n"  # dropped by the CTM filter
    "en_4001 A 4.50 0.20 noise 0.9\n"  # in the ignored segment
    "sw_4002 B 0.50 0.20 okay 0.9\n"
    "sw_4002 B 1.00 0.20 than 0.9\n"
)


@pytest.fixture
def hub5_exp(tmp_path):
    data = tmp_path / "data" / "eval2000"
    data.mkdir(parents=True)
    (data / "stm").write_text(STM)
    (data / "glm").write_text(GLM)
    decode = tmp_path / "exp" / "t" / "decode_eval2000"
    decode.mkdir(parents=True)
    (decode / "hyp.ctm").write_text(CTM)
    return tmp_path


def config(root, *overrides):
    return load_config([f"data.data_dir={root}/data", f"exp_dir={root}/exp/t", "score=hub5", *overrides])


def test_native_backend_writes_the_reports(hub5_exp):
    result = score_set(config(hub5_exp, "score.backend=native"), "eval2000")
    wer = json.loads((hub5_exp / "exp/t/decode_eval2000/wer.json").read_text())
    assert wer["callhome"] == {"wer": 0.0, "sub": 0, "del": 0, "ins": 0, "words": 5, "sentences": 1}
    assert wer["swb"] == {"wer": 50.0, "sub": 1, "del": 0, "ins": 0, "words": 2, "sentences": 1}
    assert wer["total"]["words"] == 7 and result.subsets["total"].substitutions == 1
    hub5 = hub5_exp / "exp/t/decode_eval2000/hub5"
    assert (hub5 / "scorer.txt").read_text() == "native\n"
    assert "uh" not in (hub5 / "hyp_filtered.ctm").read_text().split()


@pytest.mark.skipif(find_sctk() is None, reason="NIST SCTK not installed (Debian package sctk)")
def test_sctk_backend_gives_the_same_numbers(hub5_exp):
    native = score_set(config(hub5_exp, "score.backend=native"), "eval2000")
    sctk = score_set(config(hub5_exp, "score.backend=sctk"), "eval2000")
    assert sctk.subsets == native.subsets
    hub5 = hub5_exp / "exp/t/decode_eval2000/hub5"
    assert (hub5 / "scorer.txt").read_text() == "sctk\n" and (hub5 / "hyp.ctm.filt.sys").is_file()


def test_missing_sctk_falls_back_to_native_with_a_warning(hub5_exp, monkeypatch, caplog):
    monkeypatch.setattr(hub5_scorer, "find_sctk", lambda sctk_bin="": None)
    with caplog.at_level(logging.WARNING):
        result = score_set(config(hub5_exp), "eval2000")
    assert "NIST SCTK not found" in caplog.text and "native Python scorer" in caplog.text
    assert result.subsets["total"].words == 7
    with pytest.raises(InputError, match="score.backend=sctk but NIST SCTK"):
        score_set(config(hub5_exp, "score.backend=sctk"), "eval2000")


def test_missing_or_disabled_glm_is_an_error_never_another_metric(hub5_exp):
    (hub5_exp / "data/eval2000/glm").unlink()
    with pytest.raises(InputError, match="GLM not found.*score=jiwer"):
        score_set(config(hub5_exp, "score.backend=native"), "eval2000")
    # score.glm=none once scored without the GLM (a different WER) and crashed SCTK's csrfilt
    for backend in ("native", "sctk"):
        with pytest.raises(InputError, match="score.glm=none: Hub5 scores are defined with the GLM"):
            score_set(config(hub5_exp, f"score.backend={backend}", "score.glm=none"), "eval2000")
    assert not (hub5_exp / "exp/t/decode_eval2000/wer.json").exists()


def test_empty_hypothesis_file_is_an_error(hub5_exp, caplog):
    decode = hub5_exp / "exp/t/decode_eval2000"
    (decode / "hyp.ctm").write_text("")
    with pytest.raises(InputError, match="no words; re-run the decode stage"):
        score_set(config(hub5_exp, "score.backend=native"), "eval2000")
    # ... unless hyp.txt shows the decoder ran and found no word: all deletions, said loudly.
    (decode / "hyp.txt").write_text("en_4001-A_000000-000300 \nsw_4002-B_000000-000200 \n")
    with caplog.at_level(logging.WARNING):
        result = score_set(config(hub5_exp, "score.backend=native"), "eval2000")
    assert "hypothesised no word for any of its 2 utterances" in caplog.text
    assert result.subsets["total"].deletions == 5 and result.subsets["total"].correct == 1  # (%HESITATION)


def test_hypothesis_sides_missing_from_the_stm_are_an_error(hub5_exp):
    (hub5_exp / "exp/t/decode_eval2000/hyp.ctm").write_text(CTM + "sw_9999 A 0.1 0.2 hi 0.9\n")
    with pytest.raises(InputError, match="not in the stm"):
        score_set(config(hub5_exp, "score.backend=native"), "eval2000")


def test_a_set_without_stm_is_an_error_not_a_jiwer_score(hub5_exp):
    dev = hub5_exp / "data/train_dev"
    dev.mkdir()
    (dev / "text").write_text("sw02001-A_000000-000100 hello there\n")
    decode = hub5_exp / "exp/t/decode_train_dev"
    decode.mkdir()
    (decode / "hyp.txt").write_text("sw02001-A_000000-000100 hello\n")
    with pytest.raises(InputError, match="train_dev/stm: no stm .*score it with score=jiwer"):
        score_set(config(hub5_exp), "train_dev")
    assert not (decode / "wer.json").exists()
    # a mistyped score.stm is named as the option it came from
    with pytest.raises(InputError, match=r"nowhere\.stm: no stm \(score\.stm\)"):
        score_set(config(hub5_exp, f"score.stm={hub5_exp}/nowhere.stm"), "eval2000")
    assert score_set(config(hub5_exp, "score=jiwer"), "train_dev").subsets["total"].deletions == 1


def test_non_utf8_stm_names_the_file_and_line(hub5_exp):
    stm = hub5_exp / "data/eval2000/stm"
    bad = b"sw_4002 B sw_4002_B 3.00 4.00 <O,sw,M> CAF\xe9"
    stm.write_bytes(STM.encode() + bad + b"\n")
    line, column = STM.count("\n") + 1, len(bad)
    with pytest.raises(InputError, match=rf"stm:{line}: not valid UTF-8 \(byte 0xe9 at column {column}\)"):
        score_set(config(hub5_exp, "score.backend=native"), "eval2000")


def test_the_stage_scores_a_set_again_only_when_its_record_says_so(hub5_exp, capsys, caplog):
    """python -m asr.score by the stage record: unchanged hypotheses, references and options keep
    the reports (and print the same table); an edited CTM, another option or no record (a stage
    killed before writing it) scores again."""
    from asr.score.stage import run

    cfg = config(hub5_exp, "score.backend=native")

    def scored(c=cfg) -> tuple[bool, str]:
        caplog.clear()
        with caplog.at_level("INFO", logger="asr.score"):
            run(c)
        return "scored already" not in caplog.text, capsys.readouterr().out

    made, table = scored()
    assert made and scored() == (False, table) and "| total |" in table
    ctm = hub5_exp / "exp" / "t" / "decode_eval2000" / "hyp.ctm"
    ctm.write_text(CTM.replace(" than ", " then "))
    made, better = scored()
    assert made and better != table and f"{ctm} changed since the score stage read it" in caplog.text
    assert scored(config(hub5_exp, "score.backend=native", "score.per_speaker=false"))[0]
    assert not scored(config(hub5_exp, "score.backend=native", "score.per_speaker=false"))[0]
    (ctm.parent / "score.record.json").unlink()
    assert scored()[0] and not scored()[0]
