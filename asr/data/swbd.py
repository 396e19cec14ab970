"""Switchboard-1 (LDC97S62) with the MS98 transcripts -> a Kaldi data dir, as Kaldi's
egs/swbd/s5c/local/swbd1_data_prep.sh makes it.

One recording per conversation side (`sw02001-A` is channel 1 of sw02001.sph, `-B` channel
2), one speaker per side, one utterance per transcript line with text left after
normalisation: `sw02001-A_000098-001156` covers 0.98 s to 11.56 s (times rounded to
centiseconds, half up, as Kaldi does). `prepare_swbd` is a pure function of the corpus.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from asr.data.datadir import DataDir, Segment, swbd_utt_id
from asr.data.fix import fit_segments_to_audio
from asr.data.pairing import names, pair_sides
from asr.data.text_norm import normalize_ms98_text
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
            missing.append(f"{Path(swbd_dir) / 'swb1_d1/data/sw0NNNN.sph'}: no SPHERE files sw0NNNN.sph below {swbd_dir}")
    if ms98_dir is None:
        return missing
    if not Path(ms98_dir).is_dir():
        missing.append(f"{ms98_dir}: MS98 transcript directory (swb_ms98_transcriptions) not found")
    elif not find_ms98_transcripts(ms98_dir):
        missing.append(f"{Path(ms98_dir) / 'NN/NNNN/swNNNNA-ms98-a-trans.text'}: no MS98 *-trans.text files in {ms98_dir}")
    return missing


def ms98_side(label: str, where: str) -> str:
    """`sw2001A-ms98-a-0002` -> `sw02001-A` (Kaldi inserts the 0 of the audio file names)."""
    match = MS98_LABEL.match(label)
    if not match:
        raise InputError(f"{where}: label {label!r} is not of the form swNNNNA-ms98-a-NNNN; is this an MS98 -trans.text file?")
    return f"sw0{match.group(1)}-{match.group(2).upper()}"


def read_ms98_transcript(path: Path) -> list[TranscriptLine]:
    """Lines `sw2001A-ms98-a-0002 0.977625 11.561375 hi um yeah ...` of one -trans.text file.

    Kaldi checks that the lines come in order (`sort -c`) and stops if not; the order does not
    matter to us (utterances are keyed by id), so an unsorted file is only reported.
    """
    lines = []
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
        lines.append(TranscriptLine(ms98_side(fields[0], where), start, end, words, where))
    _report_disorder(path, lines)
    return lines


def _report_disorder(path: Path, lines: list[TranscriptLine]) -> None:
    keys = [(line.side, centiseconds(line.start), centiseconds(line.end)) for line in lines]
    out_of_order = sum(1 for a, b in zip(keys, keys[1:]) if b < a)
    if out_of_order:
        log.warning("%s: %d lines come before the line above them (Kaldi's sort -c would stop here); "
                    "the utterances are sorted by id anyway", path, out_of_order)


def _warn_missing_sph(found: int, expected: int) -> None:
    if found < expected:
        log.warning("found %d SPHERE files, %d fewer than the %d expected; a partial copy?", found, expected - found, expected)
    elif found > expected:
        log.info("found %d SPHERE files (more than the %d expected)", found, expected)


def _add_utterances(d: DataDir, lines: list[TranscriptLine], dropped: Counter) -> None:
    """Normalise the text of each line and add the non-empty ones as utterances."""
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
        if utt in d.text:
            log.warning("%s: utterance id %s repeats an earlier line; keeping the first", line.where, utt)
            dropped["duplicate utterance id"] += 1
            continue
        d.text[utt] = text
        d.utt2spk[utt] = line.side
        d.segments[utt] = Segment(line.side, start_cs / 100, end_cs / 100)


def _add_recordings(d: DataDir, sph: dict[str, Path]) -> None:
    for side in sorted(set(d.utt2spk.values())):
        conv, channel_name = side.split("-")
        d.wav_scp[side] = sph2pipe_command(sph[conv], 1 if channel_name == "A" else 2)
        d.reco2file_and_channel[side] = (conv, channel_name)


def read_transcripts_by_side(ms98_dir: str | os.PathLike) -> dict[str, list[TranscriptLine]]:
    """Every -trans.text line below `ms98_dir`, grouped by conversation side (sw02001-A)."""
    by_side: dict[str, list[TranscriptLine]] = {}
    for path in find_ms98_transcripts(ms98_dir):
        for line in read_ms98_transcript(path):
            by_side.setdefault(line.side, []).append(line)
    return by_side


def expected_ms98_file(ms98_dir: str | os.PathLike, side: str) -> str:
    """Where the MS98 transcript of `sw02001-B` lives: <ms98_dir>/20/2001/sw2001B-ms98-a-trans.text."""
    root = Path(ms98_dir) / MS98_SUBDIR if (Path(ms98_dir) / MS98_SUBDIR).is_dir() else Path(ms98_dir)
    number, channel = side[3:7], side[-1]
    return str(root / number[:2] / number / f"sw{number}{channel}-ms98-a-trans.text")


def prepare_swbd(
    swbd_dir: str | os.PathLike,
    ms98_dir: str | os.PathLike,
    expected_sph_files: int = RELEASE_SPH_FILES,
    missing_transcript: str = "skip",
    max_unreadable: float = 1.0,
) -> DataDir:
    """The Switchboard-1 training data dir (all conversations; the dev split is the caller's).

    What is left out (unpaired sides, [silence]-only lines, segments past the audio) is
    counted and logged with names; a missing corpus is an InputError showing the layout.
    A side with audio but no transcript is skipped, or refused when `missing_transcript` is
    "error".
    """
    missing = missing_swbd_inputs(swbd_dir, ms98_dir)
    if missing:
        raise InputError("Switchboard-1 corpus incomplete:\n  " + "\n  ".join(missing) + "\n" + LAYOUT)
    sph = find_sph_files(swbd_dir)
    _warn_missing_sph(len(sph), expected_sph_files)
    by_side = read_transcripts_by_side(ms98_dir)
    paired = pair_sides(by_side, sph, missing_transcript, lambda side: expected_ms98_file(ms98_dir, side), "swbd")
    d, dropped = DataDir(), Counter()
    for side in sorted(paired):
        _add_utterances(d, by_side[side], dropped)
    for reason, count in sorted(dropped.items()):
        log.info("dropped %d transcript lines: %s", count, reason)
    silent = paired - set(d.utt2spk.values())
    if silent:
        log.warning("skipped %d sides with no speech left after normalisation: %s", len(silent), names(silent))
    _add_recordings(d, sph)
    d, _, _ = fit_segments_to_audio(d, max_unreadable=max_unreadable)
    log.info("swbd: %d utterances from %d conversation sides", len(d.utt2spk), len(d.wav_scp))
    return d
