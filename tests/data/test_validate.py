"""The validator on a valid prepared data dir, then with one thing broken at a time: each
problem is found, and its message names the file (and line)."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path


from asr.data.sphere import read_sphere_header
from asr.data.validate import full_read_sample, main, validate_data_dir

REPO = Path(__file__).resolve().parents[2]
UTT = "sw02001-A_001156-001528"


def sph_of(data_dir: Path) -> Path:
    """The copy of sw02001.sph that the `data_dir` fixture's wav.scp names."""
    return (data_dir.parent / "LDC97S62/swb1_d1/data/sw02001.sph").resolve()


def test_prepared_dir_is_valid(data_dir):
    assert validate_data_dir(data_dir) == []


def test_each_breakage_found_with_file_and_line(data_dir, break_dir, breakage_name):
    name, line, message = break_dir(breakage_name)
    problems = validate_data_dir(data_dir)
    matching = [p for p in problems if message in p.message]
    assert matching, "\n".join(map(str, problems))
    assert matching[0].file == str(data_dir / name)
    assert matching[0].line == line
    assert str(matching[0]).startswith(f"{data_dir / name}:{line}: " if line else f"{data_dir / name}: ")


def test_missing_audio_reports_both_sides_and_nothing_else(data_dir, break_dir):
    sph = sph_of(data_dir)
    break_dir("missing_audio")
    problems = validate_data_dir(data_dir)
    assert [(p.file, p.line, p.message) for p in problems] == [
        (str(data_dir / "wav.scp"), 1, f"audio file not found: {sph}"),
        (str(data_dir / "wav.scp"), 2, f"audio file not found: {sph}"),
    ]


def test_no_audio_skips_audio_checks(data_dir, break_dir):
    break_dir("missing_audio")
    break_dir("segment_past_end")
    problems = validate_data_dir(data_dir, check_audio=False)
    # only the table-level consequence of the longer segment remains
    assert [str(p) for p in problems] == [f"{data_dir / 'utt2dur'}:2: {UTT}: 3.720s but its segment lasts 13.440s"]


def test_required_files_missing(data_dir):
    (data_dir / "spk2utt").unlink()
    (data_dir / "text").unlink()
    problems = [str(p) for p in validate_data_dir(data_dir)]
    assert f"{data_dir / 'spk2utt'}: missing; regenerate it from utt2spk with python -m asr.data.fix" in problems
    assert f"{data_dir / 'text'}: missing; every data dir needs transcripts" in problems


def test_many_problems_of_one_kind_are_capped(data_dir):
    text = data_dir / "text"
    text.write_text("".join(f"{line.split()[0]}\n" for line in text.read_text().splitlines()))
    problems = validate_data_dir(data_dir, check_audio=False)
    assert len(problems) == 6  # 5 examples + "... and 1 more empty transcripts"
    assert problems[-1].message == "... and 1 more empty transcripts"


def test_sphere_header_read_directly(data_dir):
    header = read_sphere_header(sph_of(data_dir))
    assert (header.sample_count, header.sample_rate, header.channel_count, header.sample_coding) == (
        160000,
        8000,
        2,
        "ulaw",
    )
    assert header.duration == 20.0 and header.expected_file_bytes == 1024 + 320000


def test_full_read_sample_is_spread_and_deterministic():
    paths = [f"f{i}" for i in range(10)]
    assert full_read_sample(paths, 3) == {"f0", "f4", "f9"}
    assert full_read_sample(paths, 20) == set(paths)
    assert full_read_sample(paths, 0) == set()


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "asr.data.validate", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_cli_exit_status_and_messages(data_dir, break_dir, tmp_path):
    ok = _run(str(data_dir))
    assert ok.returncode == 0 and f"{data_dir}: valid" in ok.stdout
    break_dir("empty_transcript")
    bad = _run(str(data_dir), str(tmp_path / "nowhere"))
    assert bad.returncode == 1
    assert f"{data_dir / 'text'}:2: utterance {UTT!r} has an empty transcript" in bad.stderr
    assert f"{tmp_path / 'nowhere'}: data directory not found" in bad.stderr
    assert "Traceback" not in bad.stderr


def _sorted_data_dir(path: Path, utterances: int, per_speaker: int = 100) -> Path:
    """A valid data dir of `utterances` (its audio is not read): one recording per speaker."""
    path.mkdir()
    utts = [
        (f"spk{i // per_speaker:05d}", f"spk{i // per_speaker:05d}-{i % per_speaker:05d}") for i in range(utterances)
    ]
    speakers = sorted({spk for spk, _ in utts})
    tables = {
        "utt2spk": (f"{utt} {spk}" for spk, utt in utts),
        "spk2utt": (f"{spk} " + " ".join(utt for s, utt in utts if s == spk) for spk in speakers),
        "text": (f"{utt} a transcript of some words" for _, utt in utts),
        "segments": (f"{utt} {spk} {i % per_speaker}.00 {i % per_speaker}.50" for i, (spk, utt) in enumerate(utts)),
        "utt2dur": (f"{utt} 0.500" for _, utt in utts),
        "feats.scp": (f"{utt} feats.ark:{i}" for i, (_, utt) in enumerate(utts)),
        "wav.scp": (f"{spk} /audio/{spk}.wav" for spk in speakers),
        "reco2file_and_channel": (f"{spk} {spk} A" for spk in speakers),
        "cmvn.scp": (f"{spk} cmvn.ark:{i}" for i, spk in enumerate(speakers)),
    }
    for name, lines in tables.items():
        (path / name).write_text("".join(f"{line}\n" for line in lines))
    return path


def _traced_peak(data_dir: Path) -> int:
    tracemalloc.start()
    try:
        assert validate_data_dir(data_dir, check_audio=False) == []
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_utterances(tmp_path):
    """Tables are streamed and merge-joined: nothing is kept per utterance, only per speaker and recording."""
    small, large = _sorted_data_dir(tmp_path / "small", 2_000), _sorted_data_dir(tmp_path / "large", 20_000)
    validate_data_dir(small, check_audio=False)  # one-time allocations (imports, caches) are not what is measured
    growth = _traced_peak(large) - _traced_peak(small)
    # Measured about 1.1 bytes per added utterance (from the 180 added speakers and recordings); keeping
    # rows, or just the keys, of an utterance table costs 100 bytes and more per utterance (1.6 KB before).
    assert growth < 50 * 18_000, f"peak grew by {growth / 18_000:.0f} bytes per utterance"


def test_a_valid_dir_is_recorded_and_checked_again_only_when_a_table_or_an_option_changed(data_dir, capsys):
    record = data_dir / "validate.record.json"

    def checked(*args: str) -> bool:
        """Whether main() checked the dir (rather than skipping it by its record)."""
        capsys.readouterr()
        main([str(data_dir), *args])
        return "checked already" not in capsys.readouterr().out

    assert checked() and record.is_file()
    assert not checked()
    assert checked("--no-audio")  # another option: checked again, and recorded with it
    assert not checked("--no-audio")
    assert checked("--no-audio", "--force")
    record.unlink()
    assert checked("--no-audio") and record.is_file()

    text = data_dir / "text"
    text.write_text(text.read_text().replace(" ", "  ", 1))  # an edited table
    capsys.readouterr()
    main([str(data_dir), "--no-audio"])
    assert f"{text} changed since the validate stage read it" in capsys.readouterr().err


def test_an_invalid_dir_gets_no_record(data_dir, break_dir, capsys):
    assert main([str(data_dir), "--no-audio"]) == 0
    break_dir("empty_transcript")
    assert main([str(data_dir), "--no-audio"]) == 1  # the edit is seen
    assert not (data_dir / "validate.record.json").exists()
    assert main([str(data_dir), "--no-audio"]) == 1
