"""The fixer repairs each breakage the validator finds, and reports exact counts."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asr.data.datadir import read_data_dir
from asr.data.fix import fix_data_dir
from asr.data.validate import validate_data_dir
from asr.utils.errors import InputError

REPO = Path(__file__).resolve().parents[2]
UTT = "sw02001-A_001156-001528"


def replace_in(path: Path, old: str, new: str) -> None:
    path.write_text(path.read_text().replace(old, new))


# breakage -> (utterances kept of 6, recordings kept, dropped reasons)
EXPECTED = {
    "unsorted_text": (6, 3, {}),
    "duplicate_key": (6, 3, {}),
    "missing_text": (5, 3, {"no transcript in text": 1}),
    "empty_transcript": (5, 3, {"empty transcript": 1}),
    "spk2utt_mismatch": (6, 3, {}),
    "segment_past_end": (5, 3, {"segment past the end of the audio": 1}),
    "missing_audio": (2, 1, {"recording missing or unreadable": 4}),
    "truncated_sphere": (2, 1, {"recording missing or unreadable": 4}),
    "transcript_without_audio": (4, 2, {"recording not in wav.scp": 2}),
    "mismatched_ids": (5, 3, {"no transcript in text": 1}),
    "no_final_newline": (6, 3, {}),
    "empty_line": (6, 3, {}),
    "reco2file_and_channel_mismatch": (6, 3, {}),
    "unused_recording": (6, 3, {}),
}


@pytest.mark.parametrize("fixable", EXPECTED)
def test_fixer_repairs_each_breakage(data_dir, break_dir, fixable):
    break_dir(fixable)
    report = fix_data_dir(data_dir)
    kept, recordings, dropped = EXPECTED[fixable]
    assert (report.utts_before, report.utts_after, report.recordings_after) == (6, kept, recordings)
    assert report.dropped == Counter(dropped)
    assert report.remaining == []
    assert validate_data_dir(data_dir) == []
    assert report.summary().startswith(f"{data_dir}: kept {kept} of 6 utterances")


def test_fixer_notes_what_it_changed(data_dir, break_dir):
    break_dir("duplicate_key")
    break_dir("reco2file_and_channel_mismatch")
    report = fix_data_dir(data_dir)
    assert "utt2spk: removed 1 repeated keys (kept the first line of each)" in report.repairs
    assert "reco2file_and_channel: added sw02005-A" in report.repairs
    assert read_data_dir(data_dir).reco2file_and_channel["sw02005-A"] == ("sw02005", "A")


def test_fixer_combined_counts(data_dir, break_dir):
    break_dir("empty_transcript")
    replace_in(data_dir / "segments", "2.50 6.13", "2.50 26.13")
    (data_dir.parent / "LDC97S62/swb1_d2/data/SW02005.SPH").unlink()
    report = fix_data_dir(data_dir)
    assert (report.utts_after, report.utts_before) == (2, 6)
    assert (report.recordings_after, report.recordings_before) == (2, 3)
    assert (report.speakers_after, report.speakers_before) == (2, 3)
    assert report.dropped == Counter(
        {"empty transcript": 1, "segment past the end of the audio": 1, "recording missing or unreadable": 2}
    )
    d = read_data_dir(data_dir)
    assert d.utts == ["sw02001-A_000098-001156", "sw02001-B_000613-000999"]
    assert sorted(d.wav_scp) == ["sw02001-A", "sw02001-B"] and sorted(d.utt2dur) == d.utts
    assert (
        data_dir / "spk2utt"
    ).read_text() == "sw02001-A sw02001-A_000098-001156\nsw02001-B sw02001-B_000613-000999\n"


def test_small_overshoot_clipped_not_dropped(data_dir):
    replace_in(data_dir / "segments", "11.56 15.28", "11.56 20.30")
    report = fix_data_dir(data_dir)
    assert report.utts_after == 6 and not report.dropped
    assert "segments: clipped the end of 1 segments to the audio" in report.repairs
    assert read_data_dir(data_dir).segments[UTT].end == 20.0


def test_backup_and_other_files_kept(data_dir, break_dir):
    original_text = (data_dir / "text").read_bytes()
    (data_dir / "conf").mkdir()
    (data_dir / "conf/fbank.conf").write_text("--sample-frequency=8000\n")
    utts = [line.split()[0] for line in (data_dir / "utt2spk").read_text().splitlines()]
    (data_dir / "utt2num_frames").write_text("".join(f"{utt} 100\n" for utt in utts))
    break_dir("empty_transcript")
    broken_text = (data_dir / "text").read_bytes()
    fix_data_dir(data_dir)
    assert (data_dir / ".backup/text").read_bytes() == broken_text != original_text
    assert (data_dir / "conf/fbank.conf").read_text() == "--sample-frequency=8000\n"
    assert UTT not in (data_dir / "utt2num_frames").read_text()
    assert len((data_dir / "utt2num_frames").read_text().splitlines()) == 5
    assert validate_data_dir(data_dir) == []


def test_speaker_prefix_cannot_be_fixed_and_is_reported(data_dir, break_dir):
    break_dir("speaker_not_prefix")
    report = fix_data_dir(data_dir)
    assert report.utts_after == 6
    assert any("does not start with its speaker id 'spkB'" in p.message for p in report.remaining)
    assert "still wrong:" in report.summary()


def test_no_audio_keeps_segments_past_the_audio(data_dir, break_dir):
    break_dir("segment_past_end")
    report = fix_data_dir(data_dir, check_audio=False)
    assert report.utts_after == 6 and not report.dropped


def test_nothing_left_is_an_error_and_leaves_the_dir_alone(data_dir):
    text = data_dir / "text"
    text.write_text("".join(f"{line.split()[0]}\n" for line in text.read_text().splitlines()))
    before = (data_dir / "text").read_bytes()
    with pytest.raises(InputError, match="no utterances would remain"):
        fix_data_dir(data_dir)
    assert (data_dir / "text").read_bytes() == before


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "asr.data.fix", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_cli(data_dir, break_dir, tmp_path):
    break_dir("speaker_not_prefix")
    unfixable = _run(str(data_dir))
    assert unfixable.returncode == 1 and "still wrong:" in unfixable.stdout
    break_dir("missing_audio")  # also removes the utterances of the badly named speaker
    ok = _run(str(data_dir))
    assert ok.returncode == 0, ok.stderr
    assert f"{data_dir}: kept 2 of 6 utterances, 1 of 3 recordings, 1 of 3 speakers" in ok.stdout
    assert "dropped 4 utterances: recording missing or unreadable" in ok.stdout
    missing = _run(str(tmp_path / "nowhere"))
    assert missing.returncode == 2
    assert f"error: {tmp_path / 'nowhere'}: data directory not found" in missing.stderr


def test_unsegmented_dir_durations_come_from_the_audio(tmp_path):
    """Without segments, wav.scp is keyed by utterance and utt2dur must match the whole file."""
    d = tmp_path / "dir"
    d.mkdir()
    sf.write(tmp_path / "u1.wav", np.zeros(8000 * 3, dtype=np.float32), 8000)
    (d / "wav.scp").write_text(f"spk1-u1 {tmp_path / 'u1.wav'}\n")
    (d / "text").write_text("spk1-u1 hello there\n")
    (d / "utt2spk").write_text("spk1-u1 spk1\n")
    (d / "spk2utt").write_text("spk1 spk1-u1\n")
    (d / "utt2dur").write_text("spk1-u1 2.500\n")
    assert [str(p) for p in validate_data_dir(d)] == [f"{d / 'utt2dur'}:1: spk1-u1: 2.500s but the audio lasts 3.000s"]
    report = fix_data_dir(d)
    assert report.repairs == ["utt2dur: set 1 durations from the segments or audio"]
    assert (d / "utt2dur").read_text() == "spk1-u1 3.000\n"
    assert validate_data_dir(d) == []
