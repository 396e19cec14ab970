"""Input a user can get wrong ends in one line naming the file and line (exit 2 from a stage),
never a traceback and never a silent replacement: bytes that are not UTF-8 in a data dir's text,
in MS98 transcripts and in the Hub5 stm, and SPHERE headers whose numbers cannot be right.
(The config values of the list are tested in tests/test_config.py.)"""

from __future__ import annotations

import re
import shutil

import pytest

from asr.data.audio import read_recording
from asr.data.datadir import read_data_dir
from asr.data.hub5 import prepare_eval2000
from asr.data.sphere import read_sphere_header
from asr.data.swbd import read_ms98_transcript
from asr.data.validate import validate_data_dir
from asr.utils.errors import InputError
from tests.data.conftest import build_ldc_tree
from tests.faults.conftest import run_stage, tone, write_wav_data_dir


@pytest.fixture(scope="module")
def ldc(tmp_path_factory):
    return build_ldc_tree(tmp_path_factory.mktemp("ldc"))


def latin1_line(path, lineno: int) -> None:
    """Re-encode one line of a text file as Latin-1 with an é in it (what a copy through an
    old editor does)."""
    lines = path.read_bytes().split(b"\n")
    lines[lineno - 1] = lines[lineno - 1] + " café".encode("latin-1")
    path.write_bytes(b"\n".join(lines))


def test_non_utf8_transcript_in_a_data_dir(tmp_path):
    data = write_wav_data_dir(tmp_path, {"sw02001-A": tone(1.0), "sw02002-A": tone(1.0, 2)})
    latin1_line(data / "text", 2)
    with pytest.raises(InputError, match=rf"^{data / 'text'}:2: not valid UTF-8 \(byte 0xe9 at column \d+\)"):
        read_data_dir(data)
    assert [str(p) for p in validate_data_dir(data, check_audio=False)] == [
        f"{data / 'text'}:2: not valid UTF-8",
        f"{data / 'text'}: 1 utterances of utt2spk have no line here: sw02002-A",
    ]
    # A stage reading it: one line, exit 2 (was a UnicodeDecodeError traceback).
    proc = run_stage(
        "asr.text",
        [
            f"data.data_dir={tmp_path / 'data'}",
            f"tokenizer.lang_dir={tmp_path / 'lang'}",
            f"exp_dir={tmp_path / 'exp'}",
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{data / 'text'}:2: not valid UTF-8 (byte 0xe9" in proc.stderr


def test_non_utf8_ms98_transcript_is_an_error_not_a_replacement_character(ldc, tmp_path):
    path = tmp_path / "sw2001A-ms98-a-trans.text"
    shutil.copy(ldc.ms98_dir / "20/2001/sw2001A-ms98-a-trans.text", path)
    latin1_line(path, 3)
    with pytest.raises(InputError, match=rf"^{path}:3: not valid UTF-8 \(byte 0xe9"):
        read_ms98_transcript(path)


def test_non_utf8_stm_of_the_eval_set(ldc, tmp_path):
    text_dir = tmp_path / "LDC2002T43"
    shutil.copytree(ldc.eval2000_text_dir, text_dir)
    stm = text_dir / "reference/hub5e00.english.000405.stm"
    latin1_line(stm, 7)
    with pytest.raises(InputError, match=rf"^{stm}:7: not valid UTF-8"):
        prepare_eval2000(ldc.eval2000_dir, text_dir)


def damage_header(path, field: bytes, value: bytes) -> None:
    """Set one header field's value, keeping the header's size (the rest of it is padding)."""
    data = bytearray(path.read_bytes())
    start = data.index(field + b" -i ") + len(field) + 4
    end = data.index(b"\n", start)
    data[start:end] = value.ljust(end - start)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "field, value, message",
    [
        (b"sample_rate", b"0", "damaged SPHERE header: sample_rate 0 (must be at least 1)"),
        (b"channel_count", b"0", "damaged SPHERE header: channel_count 0 (must be at least 1)"),
        (b"sample_count", b"-5", "damaged SPHERE header: sample_count -5 (must be at least 0)"),
    ],
)
def test_sphere_header_with_impossible_numbers(ldc, tmp_path, field, value, message):
    sph = tmp_path / "sw02001.sph"
    shutil.copy(ldc.swbd_dir / "swb1_d1/data/sw02001.sph", sph)
    damage_header(sph, field, value)
    with pytest.raises(InputError, match=rf"^{re.escape(f'{sph}: {message}')}"):
        read_sphere_header(sph)
    with pytest.raises(InputError, match=re.escape(message)):  # what the features stage would meet
        read_recording(f"sph2pipe -f wav -p -c 1 {sph} |")
    data = write_wav_data_dir(tmp_path, {"sw02001-A": tone(1.0)})
    (data / "wav.scp").write_text(f"sw02001-A sph2pipe -f wav -p -c 1 {sph} |\n")
    problems = [str(p) for p in validate_data_dir(data)]
    assert problems == [
        f"{data / 'wav.scp'}:1: cannot read audio header of {sph}: {sph}: {message}; "
        "copy the file again from the corpus"
    ]
