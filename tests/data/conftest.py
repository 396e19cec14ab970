"""A tiny LDC tree in the real layouts and formats: Switchboard-1 SPHERE audio with MS98
transcripts, and Hub5-2000 audio with its pem, stm and GLM.

Known contents (what the tests check against):
  sw02001.sph  20 s, transcripts for A and B
  SW02005.SPH  12 s, upper-case name in swb1_d2; side A has a line ending 0.3 s past the audio,
               side B is [silence] only
  sw02010.sph   5 s, no transcript
  sw2007A transcript without audio

and a Fisher English tree (`fisher_tree`): two calls with audio and transcripts, one transcript
without audio.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asr.data.datadir import write_data_dir
from asr.data.prepare import with_utt2dur
from asr.data.swbd import prepare_swbd

RATE = 8000

MS98 = {
    "20/2001/sw2001A-ms98-a-trans.text": """\
sw2001A-ms98-a-0001 0.000000 0.977625 [silence]
sw2001A-ms98-a-0002 0.977625 11.561375 hi um yeah i'd like to talk about how you dress for work
sw2001A-ms98-a-0003 11.561375 15.275500 [noise] well i [laughter-guess] it's ab[solute]- \
{yuppiedom} them_1 [vocalized-noise]
sw2001A-ms98-a-0004 15.275500 19.500000 [silence]
""",
    "20/2001/sw2001B-ms98-a-trans.text": """\
sw2001B-ms98-a-0001 0.000000 2.500000 [silence]
sw2001B-ms98-a-0002 2.500000 6.125000 [laughter] [it'n/isn't] that [ex]pected
sw2001B-ms98-a-0003 6.125000 9.990000 uh-huh
""",
    "20/2005/sw2005A-ms98-a-trans.text": """\
sw2005A-ms98-a-0001 0.500000 4.000000 okay so what do you think
sw2005A-ms98-a-0002 10.000000 12.300000 right
""",
    "20/2005/sw2005B-ms98-a-trans.text": """\
sw2005B-ms98-a-0001 1.000000 3.000000 [silence]
""",
    "20/2007/sw2007A-ms98-a-trans.text": """\
sw2007A-ms98-a-0001 0.000000 3.000000 hello
""",
}

PEM = """\
;; CATEGORY "0" "" ""
;; LABEL "O" "Overall" "The Overall Test Set"
sw_4390 A unknown_speaker 0.50 2.30
sw_4390 A unknown_speaker 2.40 4.00
sw_4390 B unknown_speaker 1.00 3.50
sw_4390 B unknown_speaker 5.00 6.00
en_4156 A unknown_speaker 301.85 302.48
en_4156 B unknown_speaker 100.00 101.50
"""

STM = """\
;; CATEGORY "0" "" ""
;; LABEL "O" "Overall" "The Overall Test Set"
sw_4390 A sw_4390_A 0.50 2.30 <O,en,M,en-M> (%HESITATION) I THINK SO ((UH-)
sw_4390 A sw_4390_A 2.40 4.00 <O,en,M,en-M> <B_ASIDE> YEAH (OKAY) <E_ASIDE>
sw_4390 B sw_4390_B 1.00 3.50 <O,en,F,en-F> IGNORE_TIME_SEGMENT_IN_SCORING
sw_4390 B sw_4390_B 5.00 6.00 <O,en,F,en-F> (%HESITATION)
en_4156 A en_4156_A 301.85 302.48 <O,en,F,en-F> HE IS A POLICE OFFICER
en_4156 B en_4156_B 100.00 101.50 <O,en,M,en-M> OH REALLY
"""

GLM = """\
;;  File: en20000405_hub5.glm
* name "en20000405_hub5.glm"
* format = 'NIST1'
* max_nrules = '2000'
* copy_no_hit = 'T'
* case_sensitive = 'F'

;; Hesitation mappings
UH => %HESITATION / [ ] __ [ ] ;; hesitation
UM => %HESITATION / [ ] __ [ ]
I'M => I AM / [ ] __ [ ]
"""


def write_sphere(path: Path, seconds: float, seed: int) -> None:
    """2-channel 8 kHz mu-law NIST SPHERE, as LDC ships Switchboard (quiet noise plus a tone)."""
    rng = np.random.default_rng(seed)
    n = int(seconds * RATE)
    tone = 0.2 * np.sin(2 * np.pi * 440 * np.arange(n) / RATE)
    samples = np.stack([tone, -tone], axis=1) + 0.01 * rng.standard_normal((n, 2))
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, samples.astype(np.float32), RATE, format="NIST", subtype="ULAW")


@dataclass(frozen=True)
class LdcTree:
    root: Path
    swbd_dir: Path
    ms98_dir: Path
    eval2000_dir: Path
    eval2000_text_dir: Path


def build_ldc_tree(root: Path) -> LdcTree:
    tree = LdcTree(
        root, root / "LDC97S62", root / "swb_ms98_transcriptions", root / "LDC2002S09/hub5e_00", root / "LDC2002T43"
    )
    write_sphere(tree.swbd_dir / "swb1_d1/data/sw02001.sph", 20.0, 1)
    write_sphere(tree.swbd_dir / "swb1_d2/data/SW02005.SPH", 12.0, 2)
    write_sphere(tree.swbd_dir / "swb1_d2/data/sw02010.sph", 5.0, 3)
    for name, text in MS98.items():
        (tree.ms98_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (tree.ms98_dir / name).write_text(text)
    write_sphere(tree.eval2000_dir / "english/sw_4390.sph", 10.0, 4)
    write_sphere(tree.eval2000_dir / "english/en_4156.sph", 303.0, 5)
    (tree.eval2000_dir / "english/hub5e_00.pem").write_text(PEM)
    (tree.eval2000_text_dir / "reference").mkdir(parents=True)
    (tree.eval2000_text_dir / "reference/hub5e00.english.000405.stm").write_text(STM)
    (tree.eval2000_text_dir / "reference/en20000405_hub5.glm").write_text(GLM)
    return tree


@pytest.fixture(scope="session")
def ldc_tree(tmp_path_factory) -> LdcTree:
    """Read-only: tests that damage the corpus use `ldc_copy`."""
    return build_ldc_tree(tmp_path_factory.mktemp("ldc"))


@pytest.fixture
def ldc_copy(ldc_tree, tmp_path) -> LdcTree:
    root = tmp_path / "ldc"
    shutil.copytree(ldc_tree.root, root)
    return LdcTree(
        root,
        *(
            root / p.relative_to(ldc_tree.root)
            for p in (ldc_tree.swbd_dir, ldc_tree.ms98_dir, ldc_tree.eval2000_dir, ldc_tree.eval2000_text_dir)
        ),
    )


@pytest.fixture(scope="session")
def swbd_dir_template(ldc_tree, tmp_path_factory) -> Path:
    """A valid Switchboard data dir as the prepare stage writes it (once); see `data_dir`."""
    path = tmp_path_factory.mktemp("swbd") / "train"
    write_data_dir(with_utt2dur(prepare_swbd(ldc_tree.swbd_dir, ldc_tree.ms98_dir, expected_sph_files=3)), path)
    return path


@pytest.fixture
def data_dir(swbd_dir_template, ldc_tree, tmp_path) -> Path:
    """A fresh copy of the valid Switchboard data dir and of its audio, for one test to break."""
    path = tmp_path / "train"
    shutil.copytree(swbd_dir_template, path)
    audio = tmp_path / "LDC97S62"
    shutil.copytree(ldc_tree.swbd_dir, audio)
    wav_scp = path / "wav.scp"
    wav_scp.write_text(wav_scp.read_text().replace(str(ldc_tree.swbd_dir.resolve()), str(audio.resolve())))
    return path


# --- one thing broken at a time in a copy of the valid data dir (validator and fixer tests) ---

UTT = "sw02001-A_001156-001528"  # the second utterance of sw02001-A


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def set_lines(path: Path, new: list[str]) -> None:
    path.write_text("".join(new))


def sph_of(data_dir: Path, recording: str = "sw02001-A") -> Path:
    for line in lines(data_dir / "wav.scp"):
        if line.startswith(recording + " "):
            return Path(line.split()[-2])
    raise AssertionError(recording)


# Each breakage changes a copy of the valid dir and returns (file, line or None, text in the message).
def unsorted_text(d: Path):
    text = lines(d / "text")
    set_lines(d / "text", [text[1], text[0]] + text[2:])
    return "text", 2, "not sorted in C locale"


def duplicate_key(d: Path):
    rows = lines(d / "utt2spk")
    set_lines(d / "utt2spk", rows[:2] + [rows[1]] + rows[2:])
    return "utt2spk", 3, f"duplicate key {UTT!r} (first on line 2)"


def missing_text(d: Path):
    set_lines(d / "text", [line for line in lines(d / "text") if not line.startswith(UTT)])
    return "text", None, f"1 utterances of utt2spk have no line here: {UTT}"


def empty_transcript(d: Path):
    set_lines(d / "text", [f"{UTT}\n" if line.startswith(UTT) else line for line in lines(d / "text")])
    return "text", 2, f"utterance {UTT!r} has an empty transcript"


def spk2utt_mismatch(d: Path):
    set_lines(d / "spk2utt", [line.replace(f" {UTT}", "") for line in lines(d / "spk2utt")])
    return "spk2utt", None, f"utterance {UTT!r} of utt2spk is missing"


def segment_past_end(d: Path):
    set_lines(d / "segments", [line.replace("11.56 15.28", "11.56 25.00") for line in lines(d / "segments")])
    return "segments", 2, f"{UTT} ends at 25.00s but recording sw02001-A lasts 20.00s"


def missing_audio(d: Path):
    sph_of(d).unlink()
    return "wav.scp", 1, "audio file not found"


def truncated_sphere(d: Path):
    sph = sph_of(d)
    sph.write_bytes(sph.read_bytes()[: 1024 + 8000 * 2 * 5])  # 5 of 20 seconds
    return "wav.scp", 1, "truncated: the header promises 20.00s"


def transcript_without_audio(d: Path):
    set_lines(d / "wav.scp", [line for line in lines(d / "wav.scp") if not line.startswith("sw02001-A ")])
    return "segments", 1, "recording 'sw02001-A' of sw02001-A_000098-001156 is not in wav.scp"


def mismatched_ids(d: Path):
    set_lines(d / "text", [line.replace(UTT, "sw02001-A_001156-001529") for line in lines(d / "text")])
    return "text", 2, "utterance 'sw02001-A_001156-001529' is not in utt2spk"


def no_final_newline(d: Path):
    (d / "utt2spk").write_text((d / "utt2spk").read_text().rstrip("\n"))
    return "utt2spk", 6, "last line does not end with a newline"


def empty_line(d: Path):
    rows = lines(d / "segments")
    set_lines(d / "segments", rows[:3] + ["\n"] + rows[3:])
    return "segments", 4, "empty line"


def speaker_not_prefix(d: Path):
    set_lines(d / "utt2spk", [line.replace(" sw02001-B", " spkB") for line in lines(d / "utt2spk")])
    set_lines(d / "spk2utt", [line.replace("sw02001-B ", "spkB ") for line in lines(d / "spk2utt")])
    return "utt2spk", 3, "does not start with its speaker id 'spkB'"


def reco2file_and_channel_mismatch(d: Path):
    set_lines(
        d / "reco2file_and_channel",
        [line.replace("sw02005-A", "sw02005-B") for line in lines(d / "reco2file_and_channel")],
    )
    return "reco2file_and_channel", 3, "recording 'sw02005-B' is not in wav.scp"


def unused_recording(d: Path):
    set_lines(d / "wav.scp", lines(d / "wav.scp") + ["sw02009-A sph2pipe -f wav -p -c 1 /nowhere/sw02009.sph |\n"])
    return "wav.scp", 4, "recording 'sw02009-A' is used by no segment"


BREAKAGES = {
    f.__name__: f
    for f in (
        unsorted_text,
        duplicate_key,
        missing_text,
        empty_transcript,
        spk2utt_mismatch,
        segment_past_end,
        missing_audio,
        truncated_sphere,
        transcript_without_audio,
        mismatched_ids,
        no_final_newline,
        empty_line,
        speaker_not_prefix,
        reco2file_and_channel_mismatch,
        unused_recording,
    )
}


def pytest_generate_tests(metafunc):
    """A test taking `breakage_name` runs once per breakage."""
    if "breakage_name" in metafunc.fixturenames:
        metafunc.parametrize("breakage_name", list(BREAKAGES))


@pytest.fixture
def break_dir(data_dir):
    """break_dir(name) applies one breakage to `data_dir` and returns (file, line, message) to expect."""
    return lambda name: BREAKAGES[name](data_dir)


FISHER_TRANSCRIPTS = {
    "LDC2004T19/fe_03_p1_tran/data/trans/000/fe_03_00001.txt": """\
# fe_03_00001.sph
# Transcribed at the LDC

7.38 8.78 A: an- so the topic is
9.29 11.45 B: [laugh] yeah it's [lipsmack] about (( holidays ))
12.00 14.51 A: i'm [breath] not sure [cough] what
15.10 16.20 B: [sigh] [mn] okay
16.50 17.00 A:
""",
    "LDC2005T19/fe_03_p2_tran/data/trans/058/fe_03_05851.txt": """\
# fe_03_05851.sph
# Transcribed at the LDC

0.50 2.25 A: hello this is mary
2.70 4.00 B: hi i'm john
""",
    # audio of this call is missing: its sides are skipped and counted
    "LDC2005T19/fe_03_p2_tran/data/trans/058/fe_03_05852.txt": """\
# fe_03_05852.sph

1.00 2.00 A: hello
""",
}
FISHER_AUDIO = {
    "LDC2004S13/fe_03_p1_sph1/audio/000/fe_03_00001.sph": 20.0,
    "LDC2005S13/fisher_eng_tr_sp_d1/audio/058/fe_03_05851.sph": 5.0,  # part 2 under the later naming
}


@pytest.fixture
def fisher_tree(tmp_path):
    """A Fisher English tree in both LDC namings (part 1 and part 2); returns its four folders."""
    for name, text in FISHER_TRANSCRIPTS.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    for i, (name, seconds) in enumerate(FISHER_AUDIO.items()):
        write_sphere(tmp_path / name, seconds, 10 + i)
    return [str(tmp_path / d) for d in ("LDC2004T19", "LDC2005T19", "LDC2004S13", "LDC2005S13")]
