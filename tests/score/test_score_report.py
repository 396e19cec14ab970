"""The report files: wer.json shape and values, wer.md, align.txt, per-speaker table."""

import json

from asr.score.report import alignment_text, markdown_table, write_reports
from asr.score.result import ErrorCounts
from asr.score.wer import score

SWB1 = "sw_4390-A_000100-000200"
SWB2 = "sw_4390-B_000300-000400"
CH1 = "en_4156-A_000100-000200"


def hub5_result():
    refs = {SWB1: "a b c d", SWB2: "e f", CH1: "g h i j k"}
    hyps = {SWB1: "a b x d", SWB2: "e f y", CH1: "g h"}
    return score(refs, hyps)


def test_wer_json_shape_and_values(tmp_path):
    write_reports(hub5_result(), tmp_path)
    report = json.loads((tmp_path / "wer.json").read_text())
    assert report == {
        "swb": {"wer": 33.33, "sub": 1, "del": 0, "ins": 1, "words": 6, "sentences": 2},
        "callhome": {"wer": 60.0, "sub": 0, "del": 3, "ins": 0, "words": 5, "sentences": 1},
        "total": {"wer": 45.45, "sub": 1, "del": 3, "ins": 1, "words": 11, "sentences": 3},
    }
    assert list(report) == ["swb", "callhome", "total"]


def test_wer_txt_is_kaldis_wer_line_per_subset(tmp_path):
    write_reports(hub5_result(), tmp_path)
    assert (tmp_path / "wer.txt").read_text().splitlines() == [
        f"%WER 33.33 [ 2 / 6, 1 ins, 0 del, 1 sub ] {tmp_path} swb",
        f"%WER 60.00 [ 3 / 5, 0 ins, 3 del, 0 sub ] {tmp_path} callhome",
        f"%WER 45.45 [ 5 / 11, 1 ins, 3 del, 1 sub ] {tmp_path} total",
    ]


def test_wer_md_content(tmp_path):
    write_reports(hub5_result(), tmp_path)
    assert (tmp_path / "wer.md").read_text() == (
        "| Subset | WER | Sub | Del | Ins | Words | Sentences |\n"
        "|---|---:|---:|---:|---:|---:|---:|\n"
        "| swb | 33.33 | 1 | 0 | 1 | 6 | 2 |\n"
        "| callhome | 60.00 | 0 | 3 | 0 | 5 | 1 |\n"
        "| total | 45.45 | 1 | 3 | 1 | 11 | 3 |\n"
    )


def test_files_written_and_no_temporaries_left(tmp_path):
    out = tmp_path / "decode_eval2000"
    written = write_reports(hub5_result(), out)
    names = ["wer.json", "wer.md", "wer.txt", "align.txt", "wer_by_speaker.md"]
    assert written == [out / name for name in names]
    assert sorted(p.name for p in out.iterdir()) == sorted(names)  # no .tmp files left


def test_per_speaker_table_is_optional(tmp_path):
    written = write_reports(hub5_result(), tmp_path, per_speaker=False)
    assert [p.name for p in written] == ["wer.json", "wer.md", "wer.txt", "align.txt"]
    assert not (tmp_path / "wer_by_speaker.md").exists()


def test_per_speaker_table(tmp_path):
    write_reports(hub5_result(), tmp_path)
    rows = (tmp_path / "wer_by_speaker.md").read_text().splitlines()
    assert rows[0] == "| Speaker | WER | Sub | Del | Ins | Words | Sentences |"
    assert rows[2:] == [
        "| en_4156-A | 60.00 | 0 | 3 | 0 | 5 | 1 |",
        "| sw_4390-A | 25.00 | 1 | 0 | 0 | 4 | 1 |",
        "| sw_4390-B | 50.00 | 0 | 0 | 1 | 2 | 1 |",
    ]


def test_speaker_with_no_reference_words_has_no_wer():
    table = markdown_table({"spk": ErrorCounts(insertions=2, sentences=1)}, first_column="Speaker")
    assert table.splitlines()[2] == "| spk | n/a | 0 | 0 | 2 | 0 | 1 |"


def test_alignment_like_sclite_pra():
    result = score({SWB1: "a bb c d", CH1: "x y"}, {SWB1: "a b c d zed"})
    text = alignment_text(result)
    assert (
        f"id: ({SWB1})\n"
        "speaker: sw_4390-A\n"
        "Scores: (#C #S #D #I) 3 1 0 1\n"
        "REF:  a BB c d ***\n"
        "HYP:  a B  c d ZED\n"
        "Eval:   S      I\n"
    ) in text
    assert (
        f"id: ({CH1})\n"
        "speaker: en_4156-A\n"
        "Scores: (#C #S #D #I) 0 0 2 0\n"
        "Note: no hypothesis for this utterance; scored as all deletions\n"
        "REF:  X   Y\n"
        "HYP:  *** ***\n"
        "Eval: D   D\n"
    ) in text
