"""Switchboard-1 (LDC97S62) with the MS98 transcripts -> a Kaldi data dir, as Kaldi's
egs/swbd/s5c/local/swbd1_data_prep.sh makes it.

One recording per conversation side (`sw02001-A` is channel 1 of sw02001.sph, `-B` channel
2), one speaker per side, one utterance per transcript line with text left after
normalisation: `sw02001-A_000098-001156` covers 0.98 s to 11.56 s (times rounded to
centiseconds, half up, as Kaldi does). `prepare_swbd` is a pure function of the corpus;
`swbd_corpus` gives the same utterances one conversation side at a time (in sorted order),
holding no more than one side's transcript in memory.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shlex
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from asr.data.datadir import DataDir, StreamedDataDir, Utterance, swbd_utt_id
from asr.data.fix import AudioFit
from asr.data.pairing import fitted_sides, pair_sides
from asr.data.text_norm import normalize_ms98_text
from asr.kaldi.segments import Segment
from asr.kaldi.table import c_sort_key
from asr.utils.errors import InputError
from asr.utils.textfile import iter_lines

log = logging.getLogger(__name__)

RELEASE_SPH_FILES = 2435  # LDC97S62; Kaldi also accepts 2438
SPH_NAME = re.compile(r"^(sw0\d{4})\.sph$", re.IGNORECASE)
MS98_GLOB = "*/*/*-trans.text"
MS98_SUBDIR = "swb_ms98_transcriptions"  # as unpacked from switchboard_word_alignments.tar.gz
MS98_LABEL = re.compile(r"^sw(\d{4})([AB])-ms98-a-\d+$", re.IGNORECASE)
LAYOUT = """expected layout:
  <swbd_dir>/swb1_d{1,2,3,4}/data/sw0NNNN.sph                (LDC97S62 audio, NIST SPHERE)
  <ms98_dir>/NN/NNNN/swNNNN{A,B}-ms98-a-trans.text            (MS98 transcripts, swb_ms98_transcriptions)"""


@dataclass(frozen=True)
class TranscriptLine:
    side: str  # recording and speaker id, e.g. sw02001-A
    start: float
    end: float
    words: str
    where: str  # file:line, for messages


def centiseconds(seconds: float) -> int:
    """Kaldi's `int(100 * t + 0.5)`: the times in utterance ids and segments."""
    return int(100 * seconds + 0.5)


def sph2pipe_command(path: Path, channel: int) -> str:
    """Kaldi's wav.scp form; asr.data.audio reads it natively (sph2pipe need not be installed)."""
    return f"sph2pipe -f wav -p -c {channel} {shlex.quote(str(path.resolve()))} |"


def find_sph_files(swbd_dir: str | os.PathLike) -> dict[str, Path]:
    """Conversation id (sw02001) -> its SPHERE file, wherever it lies below `swbd_dir` (any case)."""
    found: dict[str, Path] = {}
    for path in sorted(Path(swbd_dir).rglob("*")):
        match = SPH_NAME.match(path.name)
        if not match or not path.is_file():
            continue
        conv = match.group(1).lower()
        if conv in found:
            log.warning("%s: conversation %s found twice, using %s", path, conv, found[conv])
            continue
        found[conv] = path
    return found


def find_ms98_transcripts(ms98_dir: str | os.PathLike) -> list[Path]:
    """`NN/NNNN/*-trans.text` below `ms98_dir`, or below its swb_ms98_transcriptions/ if it has one."""
    path = Path(ms98_dir)
    if (path / MS98_SUBDIR).is_dir():
        path = path / MS98_SUBDIR
    return sorted(path.glob(MS98_GLOB))


def missing_swbd_inputs(swbd_dir: str | os.PathLike | None, ms98_dir: str | os.PathLike | None) -> list[str]:
    """Each missing input as 'path: what should be there' (empty when everything is present);
    a location that is None (not given) is not checked."""
    missing = []
    if swbd_dir is not None:
        if not Path(swbd_dir).is_dir():
            missing.append(f"{swbd_dir}: Switchboard-1 audio directory (LDC97S62) not found")
        elif not find_sph_files(swbd_dir):
            missing.append(
                f"{Path(swbd_dir) / 'swb1_d1/data/sw0NNNN.sph'}: no SPHERE files sw0NNNN.sph below {swbd_dir}"
            )
    if ms98_dir is None:
        return missing
    if not Path(ms98_dir).is_dir():
        missing.append(f"{ms98_dir}: MS98 transcript directory (swb_ms98_transcriptions) not found")
    elif not find_ms98_transcripts(ms98_dir):
        missing.append(
            f"{Path(ms98_dir) / 'NN/NNNN/swNNNNA-ms98-a-trans.text'}: no MS98 *-trans.text files in {ms98_dir}"
        )
    return missing


def ms98_side(label: str, where: str) -> str:
    """`sw2001A-ms98-a-0002` -> `sw02001-A` (Kaldi inserts the 0 of the audio file names)."""
    match = MS98_LABEL.match(label)
    if not match:
        raise InputError(
            f"{where}: label {label!r} is not of the form swNNNNA-ms98-a-NNNN; is this an MS98 -trans.text file?"
        )
    return f"sw0{match.group(1)}-{match.group(2).upper()}"


def iter_ms98_transcript(path: Path) -> Iterator[TranscriptLine]:
    """Lines `sw2001A-ms98-a-0002 0.977625 11.561375 hi um yeah ...` of one -trans.text file."""
    for lineno, line in iter_lines(path):
        fields = line.split(maxsplit=3)
        if not fields:
            continue
        where = f"{path}:{lineno}"
        try:
            start, end = float(fields[1]), float(fields[2])
        except (IndexError, ValueError):
            raise InputError(f"{where}: expected '<label> <start> <end> <words>', got {line.strip()!r}") from None
        words = fields[3] if len(fields) > 3 else ""
        yield TranscriptLine(ms98_side(fields[0], where), start, end, words, where)


def read_ms98_transcript(path: Path) -> list[TranscriptLine]:
    """The lines of one -trans.text file.

    Kaldi checks that the lines come in order (`sort -c`) and stops if not; the order does not
    matter to us (utterances are keyed by id), so an unsorted file is only reported.
    """
    lines = list(iter_ms98_transcript(path))
    _report_disorder(path, lines)
    return lines


def _report_disorder(path: Path, lines: list[TranscriptLine]) -> None:
    keys = [(line.side, centiseconds(line.start), centiseconds(line.end)) for line in lines]
    out_of_order = sum(1 for a, b in zip(keys, keys[1:]) if b < a)
    if out_of_order:
        log.warning(
            "%s: %d lines come before the line above them (Kaldi's sort -c would stop here); "
            "the utterances are sorted by id anyway",
            path,
            out_of_order,
        )


def _warn_missing_sph(found: int, expected: int) -> None:
    if found < expected:
        log.warning(
            "found %d SPHERE files, %d fewer than the %d expected; a partial copy?", found, expected - found, expected
        )
    elif found > expected:
        log.info("found %d SPHERE files (more than the %d expected)", found, expected)


def _side_utterances(side: str, lines: Iterable[TranscriptLine], dropped: Counter) -> list[Utterance]:
    """The utterances of one side's lines with text left after normalisation, sorted by id."""
    utterances: dict[str, Utterance] = {}
    for line in lines:
        text = normalize_ms98_text(line.words)
        if not text:
            dropped["empty after normalisation ([silence] only)"] += 1
            continue
        utt = swbd_utt_id(line.side, line.start, line.end)
        start_cs, end_cs = centiseconds(line.start), centiseconds(line.end)
        if end_cs <= start_cs:
            dropped["shorter than a centisecond"] += 1
            continue
        if utt in utterances:
            log.warning("%s: utterance id %s repeats an earlier line; keeping the first", line.where, utt)
            dropped["duplicate utterance id"] += 1
            continue
        utterances[utt] = Utterance(utt, side, Segment(side, start_cs / 100, end_cs / 100), text)
    return [utterances[utt] for utt in sorted(utterances, key=c_sort_key)]


def _recordings(sides: Iterable[str], sph: dict[str, Path]) -> DataDir:
    d = DataDir()
    for side in sides:
        conv, channel_name = side.split("-")
        d.wav_scp[side] = sph2pipe_command(sph[conv], 1 if channel_name == "A" else 2)
        d.reco2file_and_channel[side] = (conv, channel_name)
    return d


def transcript_files_by_side(ms98_dir: str | os.PathLike) -> dict[str, list[Path]]:
    """The -trans.text files below `ms98_dir` holding lines of each conversation side (sw02001-A);
    every file is read through, so a malformed line stops the stage before any is written."""
    by_side: dict[str, list[Path]] = {}
    for path in find_ms98_transcripts(ms98_dir):
        for side in dict.fromkeys(line.side for line in read_ms98_transcript(path)):
            by_side.setdefault(side, []).append(path)
    return by_side


def expected_ms98_file(ms98_dir: str | os.PathLike, side: str) -> str:
    """Where the MS98 transcript of `sw02001-B` lives: <ms98_dir>/20/2001/sw2001B-ms98-a-trans.text."""
    root = Path(ms98_dir) / MS98_SUBDIR if (Path(ms98_dir) / MS98_SUBDIR).is_dir() else Path(ms98_dir)
    number, channel = side[3:7], side[-1]
    return str(root / number[:2] / number / f"sw{number}{channel}-ms98-a-trans.text")


def swbd_corpus(
    swbd_dir: str | os.PathLike,
    ms98_dir: str | os.PathLike,
    expected_sph_files: int = RELEASE_SPH_FILES,
    missing_transcript: str = "skip",
    max_unreadable: float = 1.0,
) -> StreamedDataDir:
    """The Switchboard-1 training data dir (all conversations; the dev split is the caller's).

    What is left out (unpaired sides, [silence]-only lines, segments past the audio) is
    counted and logged with names, once the utterances have been read through; a missing
    corpus is an InputError showing the layout. A side with audio but no transcript is
    skipped, or refused when `missing_transcript` is "error".
    """
    missing = missing_swbd_inputs(swbd_dir, ms98_dir)
    if missing:
        raise InputError("Switchboard-1 corpus incomplete:\n  " + "\n  ".join(missing) + "\n" + LAYOUT)
    sph = find_sph_files(swbd_dir)
    _warn_missing_sph(len(sph), expected_sph_files)
    files = transcript_files_by_side(ms98_dir)
    paired = sorted(pair_sides(files, sph, missing_transcript, functools.partial(expected_ms98_file, ms98_dir), "swbd"))
    recordings = _recordings(paired, sph)
    return StreamedDataDir(recordings, lambda: _utterances(files, paired, recordings, max_unreadable))


def _utterances(
    files: dict[str, list[Path]], sides: list[str], recordings: DataDir, max_unreadable: float
) -> Iterator[Utterance]:
    dropped = Counter()

    def lines(side: str) -> Iterator[TranscriptLine]:
        return (line for path in files[side] for line in iter_ms98_transcript(path) if line.side == side)

    per_side = ((side, _side_utterances(side, lines(side), dropped)) for side in sides)
    yield from fitted_sides("swbd", per_side, dropped, AudioFit(recordings.wav_scp, max_unreadable=max_unreadable))


def prepare_swbd(
    swbd_dir: str | os.PathLike,
    ms98_dir: str | os.PathLike,
    expected_sph_files: int = RELEASE_SPH_FILES,
    missing_transcript: str = "skip",
    max_unreadable: float = 1.0,
) -> DataDir:
    """`swbd_corpus` in memory."""
    return swbd_corpus(swbd_dir, ms98_dir, expected_sph_files, missing_transcript, max_unreadable).collect()
