"""Fisher English preparation on a hand-made tree in both LDC namings: exact ids, times, text
rules, the folder and count warnings, the side policy, and preflight errors."""

from __future__ import annotations

import logging
import re
from collections import Counter

import pytest

from asr.data.fisher import find_fisher_folders, missing_fisher_inputs, prepare_fisher, read_fisher_transcript
from asr.kaldi.segments import Segment
from asr.utils.errors import InputError


def test_fisher_exact_ids_times_and_text(fisher_tree):
    d = prepare_fisher(fisher_tree, expected_files=3)
    # 8.78 * 100 = 877.99... in floating point, truncated to 877 as Kaldi's sprintf("%06d") does
    assert d.utts == [
        "fe_03_00001-A-000738-000877",
        "fe_03_00001-A-001200-001451",
        "fe_03_00001-B-001510-001620",
        "fe_03_05851-A-000050-000225",
        "fe_03_05851-B-000270-000400",
    ]
    assert d.text["fe_03_00001-A-000738-000877"] == "an- so the topic is"
    assert d.text["fe_03_00001-A-001200-001451"] == "i'm [noise] not sure [noise] what"
    assert d.text["fe_03_00001-B-001510-001620"] == "[noise] [noise] okay"
    assert d.segments["fe_03_00001-A-000738-000877"] == Segment("fe_03_00001-A", 7.38, 8.77)
    assert d.utt2spk["fe_03_05851-B-000270-000400"] == "fe_03_05851-B"
    assert d.wav_scp["fe_03_05851-A"].startswith("sph2pipe -f wav -p -c 1 ")
    assert d.wav_scp["fe_03_05851-A"].endswith("fisher_eng_tr_sp_d1/audio/058/fe_03_05851.sph |")
    assert d.reco2file_and_channel["fe_03_00001-B"] == ("fe_03_00001", "B")


def test_fisher_skips_are_counted_and_named(fisher_tree, caplog):
    with caplog.at_level(logging.INFO, logger="asr.data"):
        prepare_fisher(fisher_tree, expected_files=3)
    log = caplog.text
    assert "dropped 1 transcript lines: uncertain transcription" in log
    assert "ignored 1 transcript lines not of the form" in log  # '16.50 17.00 A:' has no words
    assert "skipped 1 transcript sides with no audio file: fe_03_05852-A" in log
    assert "found 2 audio files, 1 fewer than the 3 expected" in log
    assert "12 of the release's 16 folders not found (Kaldi stops here): fe_03_p1_sph2," in log


def test_fisher_folder_given_directly_or_below(fisher_tree, tmp_path):
    direct = find_fisher_folders([str(tmp_path / "LDC2004T19/fe_03_p1_tran"), str(tmp_path / "LDC2005S13")])
    assert direct == {
        "fe_03_p1_tran": tmp_path / "LDC2004T19/fe_03_p1_tran",
        "fe_03_p2_sph1": tmp_path / "LDC2005S13/fisher_eng_tr_sp_d1",
    }


def test_fisher_transcript_of_another_call_is_an_error(fisher_tree, tmp_path):
    path = tmp_path / "LDC2004T19/fe_03_p1_tran/data/trans/000/fe_03_00001.txt"
    path.write_text(path.read_text().replace("# fe_03_00001.sph", "# fe_03_00002.sph"))
    with pytest.raises(InputError, match=rf"{path}:1: expected '# fe_03_00001.sph'"):
        read_fisher_transcript(path, Counter())


def test_fisher_missing_side_skipped_or_refused(fisher_tree, tmp_path, caplog):
    path = tmp_path / "LDC2005T19/fe_03_p2_tran/data/trans/058/fe_03_05851.txt"
    path.write_text("# fe_03_05851.sph\n\n0.50 2.25 A: hello this is mary\n")
    with caplog.at_level(logging.WARNING, logger="asr.data"):
        d = prepare_fisher(fisher_tree, expected_files=3)
    assert "fe_03_05851-B" not in d.wav_scp
    assert "skipped 1 audio sides with no transcript: fe_03_05851-B" in caplog.text
    with pytest.raises(
        InputError, match=r"1 conversation sides have audio but no transcript:\n  fe_03_05851-B: expected "
    ):
        prepare_fisher(fisher_tree, expected_files=3, missing_transcript="error")


def test_fisher_preflight_names_what_is_missing(tmp_path):
    (tmp_path / "LDC2004T19").mkdir()
    missing = missing_fisher_inputs([str(tmp_path / "LDC2004T19"), str(tmp_path / "nowhere")])
    assert missing[0] == f"{tmp_path / 'nowhere'}: Fisher directory not found"
    assert missing[1].startswith("fe_03_p1_tran/data/trans/NNN/fe_03_NNNNN.txt: no Fisher transcript folder below")
    assert missing[2].startswith("fe_03_p1_sph1/audio/NNN/fe_03_NNNNN.sph: no Fisher audio folder below")
    with pytest.raises(InputError, match=re.escape("fe_03_p{1,2}_sph{1..7}/audio/NNN/fe_03_NNNNN.sph")):
        prepare_fisher([str(tmp_path / "LDC2004T19")])
