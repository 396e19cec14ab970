"""Fisher English parts 1 and 2 (LDC2004T19/LDC2005T19 transcripts, LDC2004S13/LDC2005S13
audio) -> a Kaldi data dir, as Kaldi's egs/fisher_swbd/s5/local/fisher_data_prep.sh makes it.

The releases unpack into sixteen folders, found below any of the directories given:

    fe_03_p1_tran/data/trans/000/fe_03_00001.txt     transcripts, part 1 (and fe_03_p2_tran)
    fe_03_p1_sph1/audio/000/fe_03_00001.sph          audio, part 1, discs sph1..sph7
    fe_03_p2_sph1/audio/...  or  fisher_eng_tr_sp_d1/audio/...   audio, part 2 (two namings)

A transcript starts `# fe_03_00001.sph`, then lines `7.38 8.78 A: an- so the topic is`. Each
line is an utterance of side A (channel 1) or B (channel 2): `fe_03_00001-A-000738-000878`,
times truncated to centiseconds as Kaldi's sprintf("%06d") does. Lines with an uncertain
`((...))` transcription are dropped and the event tags mapped (asr.data.text_norm).

Kaldi stops when a folder is missing or the file counts differ from the release's 11,699; we
stop only when no transcripts or no audio are found at all, and otherwise warn, naming what is
missing, and prepare what pairs up. `fisher_corpus` gives the utterances one call at a time
(in sorted order), holding no more than one transcript in memory.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Iterable, Iterator

from asr.data.datadir import DataDir, StreamedDataDir, Utterance
from asr.data.fix import AudioFit
from asr.data.pairing import fitted_sides, pair_sides
from asr.data.swbd import sph2pipe_command
from asr.data.text_norm import normalize_fisher_text
from asr.kaldi.segments import Segment
from asr.kaldi.table import c_sort_key
from asr.utils.errors import InputError
from asr.utils.textfile import read_text

log = logging.getLogger(__name__)

RELEASE_FILES = 11699  # conversations in parts 1 and 2 (5,850 + 5,849), transcripts and audio alike
PARTS = ("p1", "p2")
DISCS = range(1, 8)
TRANSCRIPT_DIRS = tuple(f"fe_03_{part}_tran" for part in PARTS)
AUDIO_DIRS = tuple(f"fe_03_{part}_sph{disc}" for part in PARTS for disc in DISCS)
# LDC2005S13 as distributed later names its discs differently (Kaldi accepts both).
NEW_STYLE = {f"fe_03_p2_sph{disc}": f"fisher_eng_tr_sp_d{disc}" for disc in DISCS}
CALL_NAME = re.compile(r"^(fe_03_\d{5})\.(txt|sph)$", re.IGNORECASE)
LINE = re.compile(r"^\s*([0-9.]+)\s+([0-9.]+)\s+([AB]):\s*(\S.*?)\s*$")
LAYOUT = """expected layout (below any of data.fisher_dirs, e.g. LDC2004T19 LDC2005T19 LDC2004S13 LDC2005S13):
  fe_03_p{1,2}_tran/data/trans/NNN/fe_03_NNNNN.txt          (transcripts)
  fe_03_p{1,2}_sph{1..7}/audio/NNN/fe_03_NNNNN.sph          (audio; part 2 also as fisher_eng_tr_sp_d{1..7})"""


@dataclass(frozen=True)
class FisherLine:
    side: str  # fe_03_00001-A
    start_cs: int
    end_cs: int
    words: str
    where: str


def find_fisher_folders(fisher_dirs: Iterable[str | os.PathLike]) -> dict[str, Path]:
    """Release folder name (fe_03_p1_tran, fe_03_p2_sph3...) -> where it is; a given dir may be
    the folder itself or hold it (the first one found wins)."""
    found: dict[str, Path] = {}
    for folder in TRANSCRIPT_DIRS + AUDIO_DIRS:
        for base in map(Path, fisher_dirs):
            for candidate in (base, base / folder, base / NEW_STYLE.get(folder, folder)):
                if candidate.name in (folder, NEW_STYLE.get(folder)) and candidate.is_dir():
                    found.setdefault(folder, candidate)
    return found


def _calls(paths: Iterable[Path], suffix: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted(paths):
        match = CALL_NAME.match(path.name)
        if match and match.group(2).lower() == suffix and path.is_file():
            out.setdefault(match.group(1).lower(), path)
    return out


def find_fisher_transcripts(folders: dict[str, Path]) -> dict[str, Path]:
    return _calls(
        (p for name in TRANSCRIPT_DIRS if name in folders for p in (folders[name] / "data").rglob("*")), "txt"
    )


def find_fisher_audio(folders: dict[str, Path]) -> dict[str, Path]:
    return _calls((p for name in AUDIO_DIRS if name in folders for p in folders[name].rglob("*")), "sph")


def missing_fisher_inputs(fisher_dirs: list[str]) -> list[str]:
    """What stops preparation: no directory, no transcript folder, or no audio folder at all."""
    missing = [f"{d}: Fisher directory not found" for d in fisher_dirs if not Path(d).is_dir()]
    folders = find_fisher_folders(fisher_dirs)
    where = ", ".join(map(str, fisher_dirs))
    if not any(name in folders for name in TRANSCRIPT_DIRS):
        missing.append(f"fe_03_p1_tran/data/trans/NNN/fe_03_NNNNN.txt: no Fisher transcript folder below {where}")
    if not any(name in folders for name in AUDIO_DIRS):
        missing.append(f"fe_03_p1_sph1/audio/NNN/fe_03_NNNNN.sph: no Fisher audio folder below {where}")
    return missing


def _warn_incomplete(folders: dict[str, Path], transcripts: int, audio: int, expected: int) -> None:
    absent = [name for name in TRANSCRIPT_DIRS + AUDIO_DIRS if name not in folders]
    if absent:
        log.warning(
            "fisher: %d of the release's 16 folders not found (Kaldi stops here): %s", len(absent), ", ".join(absent)
        )
    for what, count in (("transcript", transcripts), ("audio", audio)):
        if count < expected:
            log.warning(
                "fisher: found %d %s files, %d fewer than the %d expected; a partial copy?",
                count,
                what,
                expected - count,
                expected,
            )


def read_fisher_transcript(path: Path, skipped: Counter) -> list[FisherLine]:
    """The utterance lines of one transcript; its first line must name its own audio file."""
    call = path.stem.lower()
    text = read_text(path).splitlines()
    first = text[0].strip() if text else ""
    if not re.fullmatch(rf"#\s*{re.escape(call)}\.sph", first, re.IGNORECASE):
        raise InputError(
            f"{path}:1: expected '# {call}.sph' (the conversation this transcript belongs to), got {first!r}"
        )
    lines = []
    for lineno, line in enumerate(text[1:], 2):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = LINE.match(line)
        if not match:
            skipped["not of the form '<start> <end> <A|B>: <words>'"] += 1
            continue
        start, end = int(float(match.group(1)) * 100), int(float(match.group(2)) * 100)
        lines.append(FisherLine(f"{call}-{match.group(3)}", start, end, match.group(4), f"{path}:{lineno}"))
    return lines


def fisher_utt_id(side: str, start_cs: int, end_cs: int) -> str:
    return f"{side}-{start_cs:06d}-{end_cs:06d}"


def _side_utterances(side: str, lines: Iterable[FisherLine], dropped: Counter) -> list[Utterance]:
    """The utterances of one side's lines with text left after normalisation, sorted by id."""
    utterances: dict[str, Utterance] = {}
    for line in lines:
        text = normalize_fisher_text(line.words)
        if not text:
            dropped["uncertain transcription '((...))' (Kaldi drops these)"] += 1
            continue
        if line.end_cs <= line.start_cs:
            dropped["end not after start"] += 1
            continue
        utt = fisher_utt_id(line.side, line.start_cs, line.end_cs)
        if utt in utterances:
            dropped["duplicate utterance id (first kept)"] += 1
            continue
        utterances[utt] = Utterance(utt, side, Segment(side, line.start_cs / 100, line.end_cs / 100), text)
    return [utterances[utt] for utt in sorted(utterances, key=c_sort_key)]


def _transcribed_sides(transcripts: dict[str, Path]) -> set[str]:
    """The sides with transcript lines; every transcript is read through, so a malformed one
    stops the stage before anything is written."""
    skipped, sides = Counter(), set()
    for call in sorted(transcripts):
        sides.update(line.side for line in read_fisher_transcript(transcripts[call], skipped))
    for reason, count in sorted(skipped.items()):
        log.info("fisher: ignored %d transcript lines %s", count, reason)
    return sides


def _recordings(sides: Iterable[str], audio: dict[str, Path]) -> DataDir:
    d = DataDir()
    for side in sides:
        call, channel = side.rsplit("-", 1)
        d.wav_scp[side] = sph2pipe_command(audio[call], 1 if channel == "A" else 2)
        d.reco2file_and_channel[side] = (call, channel)
    return d


def fisher_corpus(
    fisher_dirs: list[str],
    expected_files: int = RELEASE_FILES,
    missing_transcript: str = "skip",
    max_unreadable: float = 1.0,
) -> StreamedDataDir:
    """The Fisher training data dir (both parts, whatever of them is found); what is left out
    is logged once the utterances have been read through."""
    missing = missing_fisher_inputs(fisher_dirs)
    if missing:
        raise InputError("Fisher corpus incomplete:\n  " + "\n  ".join(missing) + "\n" + LAYOUT)
    folders = find_fisher_folders(fisher_dirs)
    transcripts, audio = find_fisher_transcripts(folders), find_fisher_audio(folders)
    _warn_incomplete(folders, len(transcripts), len(audio), expected_files)

    def expected(side: str) -> str:
        return f"a line '<start> <end> {side[-1]}: <words>' in {transcripts.get(side[:-2], side[:-2] + '.txt')}"

    paired = sorted(pair_sides(_transcribed_sides(transcripts), audio, missing_transcript, expected, "fisher"))
    recordings = _recordings(paired, audio)
    return StreamedDataDir(recordings, lambda: _utterances(transcripts, paired, recordings, max_unreadable))


def _utterances(
    transcripts: dict[str, Path], sides: list[str], recordings: DataDir, max_unreadable: float
) -> Iterator[Utterance]:
    dropped = Counter()

    def per_side() -> Iterator[tuple[str, list[Utterance]]]:
        for call, call_sides in groupby(sides, key=lambda side: side.rsplit("-", 1)[0]):
            lines = read_fisher_transcript(transcripts[call], Counter())
            for side in call_sides:
                yield side, _side_utterances(side, (line for line in lines if line.side == side), dropped)

    yield from fitted_sides("fisher", per_side(), dropped, AudioFit(recordings.wav_scp, max_unreadable=max_unreadable))


def prepare_fisher(
    fisher_dirs: list[str],
    expected_files: int = RELEASE_FILES,
    missing_transcript: str = "skip",
    max_unreadable: float = 1.0,
) -> DataDir:
    """`fisher_corpus` in memory."""
    return fisher_corpus(fisher_dirs, expected_files, missing_transcript, max_unreadable).collect()
