"""Hub5-2000 English evaluation (LDC2002S09 audio, LDC2002T43 transcripts) -> a Kaldi data dir,
as Kaldi's egs/swbd/s5c/local/eval2000_data_prep.sh makes it.

Segments come from the partitioned evaluation map `english/hub5e_00.pem`, widened by 0.1 s
on each side where the neighbours leave room (Kaldi's local/extend_segments.pl); the text
of each segment from the reference stm line with the same times. Utterance ids truncate the
times to centiseconds, as Kaldi's awk `%06d` does: `en_4156-A_030185-030248`.

Where Kaldi is strict we are too: a pem segment without an stm line (or the reverse) means
the two files do not belong together, and Kaldi stops ("Segments from pem file and stm file
do not match"); so do we, naming the segments. Segments whose stm text is
IGNORE_TIME_SEGMENT_IN_SCORING get no text and are left out, as Kaldi's grep and
fix_data_dir.sh leave them out. The stm (with Kaldi's fixes for hubscr.pl) and the GLM are
stored in the data dir for scoring.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from asr.data.datadir import DataDir
from asr.data.fix import fit_segments_to_audio
from asr.data.stm import StmSegment, fix_stm, read_stm
from asr.data.swbd import sph2pipe_command
from asr.data.text_norm import is_ignored_segment, normalize_stm_text
from asr.kaldi.segments import Segment
from asr.kaldi.table import c_sort_key
from asr.utils.errors import InputError
from asr.utils.textfile import read_text

log = logging.getLogger(__name__)

PEM = Path("english/hub5e_00.pem")
STM = Path("reference/hub5e00.english.000405.stm")
GLM = Path("reference/en20000405_hub5.glm")
TEXT_SUBDIR = "2000_hub5_eng_eval_tr"  # LDC2002T43 as unpacked by some sites (Kaldi accepts it)
SPEECH_SUBDIR = "hub5e_00"  # LDC2002S09/hub5e_00/english
SEGMENT_EXTENSION_S = 0.1
MAX_NAMES = 10
LAYOUT = """expected layout:
  <eval2000_dir>/english/{sw_4NNN,en_4NNN}.sph              (LDC2002S09 audio)
  <eval2000_dir>/english/hub5e_00.pem                       (segments)
  <eval2000_text_dir>/reference/hub5e00.english.000405.stm  (LDC2002T43 reference)
  <eval2000_text_dir>/reference/en20000405_hub5.glm         (scoring GLM)"""


@dataclass(frozen=True)
class TimedLine:
    utt: str
    recording: str
    start: float
    end: float
    words: str
    where: str


def text_dir(eval2000_text_dir: str | os.PathLike) -> Path:
    """LDC2002T43 sometimes unpacks with an extra 2000_hub5_eng_eval_tr level."""
    path = Path(eval2000_text_dir)
    return path / TEXT_SUBDIR if (path / TEXT_SUBDIR).is_dir() else path


def speech_dir(eval2000_dir: str | os.PathLike) -> Path:
    """The dir holding english/: hub5e_00 itself, or the LDC2002S09 dir above it."""
    path = Path(eval2000_dir)
    if not (path / "english").is_dir() and (path / SPEECH_SUBDIR / "english").is_dir():
        return path / SPEECH_SUBDIR
    return path


def find_eval2000_sph(eval2000_dir: str | os.PathLike) -> dict[str, Path]:
    """Conversation id (sw_4390, en_4156) -> SPHERE file under english/ (any case of .sph)."""
    english = speech_dir(eval2000_dir) / "english"
    if not english.is_dir():
        return {}
    return {p.stem.lower(): p for p in sorted(english.rglob("*")) if p.suffix.lower() == ".sph" and p.is_file()}


def missing_eval2000_inputs(
    eval2000_dir: str | os.PathLike | None, eval2000_text_dir: str | os.PathLike | None
) -> list[str]:
    """Each missing input as 'path: what should be there' (empty when everything is present);
    a location that is None (not given) is not checked."""
    missing = []
    if eval2000_dir is not None:
        speech = speech_dir(eval2000_dir)
        if not find_eval2000_sph(eval2000_dir):
            missing.append(
                f"{speech / 'english'}/*.sph: no Hub5-2000 audio (LDC2002S09 hub5e_00/english/sw_4NNN.sph, en_4NNN.sph)"
            )
        if not (speech / PEM).is_file():
            missing.append(f"{speech / PEM}: segment file not found")
    if eval2000_text_dir is None:
        return missing
    reference = text_dir(eval2000_text_dir)
    for name, what in ((STM, "reference transcript (LDC2002T43)"), (GLM, "scoring GLM (LDC2002T43)")):
        if not (reference / name).is_file():
            missing.append(f"{reference / name}: {what} not found")
    return missing


def hub5_utt_id(conversation: str, side: str, start: float, end: float) -> str:
    """`en_4156-A_030185-030248`: centiseconds truncated, as Kaldi's awk printf %06d does."""
    return f"{conversation}-{side}_{int(start * 100):06d}-{int(end * 100):06d}"


def timed_line(segment: StmSegment) -> TimedLine:
    """A pem or stm line as a Hub5 segment: sides A and B, conversation ids lower case."""
    if segment.channel not in ("A", "B"):
        raise InputError(f"{segment.where}: channel {segment.channel!r}; Hub5 sides are A and B")
    conv, side = segment.file.lower(), segment.channel
    return TimedLine(
        hub5_utt_id(conv, side, segment.start, segment.end),
        f"{conv}-{side}",
        segment.start,
        segment.end,
        segment.text,
        segment.where,
    )


def read_pem(path: Path) -> list[TimedLine]:
    """`en_4156 A unknown_speaker 301.85 302.48` lines (the stm's layout without words),
    duplicates removed (Kaldi's sort -u)."""
    unique = {line.utt: line for line in map(timed_line, read_stm(path))}
    return [unique[u] for u in sorted(unique, key=c_sort_key)]


def read_reference(path: Path) -> list[TimedLine]:
    """The reference stm's segments (asr/data/stm.py reads the format)."""
    return [timed_line(segment) for segment in read_stm(path)]


def extend_segments(segments: dict[str, Segment], by: float = SEGMENT_EXTENSION_S) -> dict[str, Segment]:
    """Widen each segment by `by` seconds each side without creating overlaps (extend_segments.pl).

    Between neighbours each side gets at most half the gap; overlapping neighbours are left
    as they are; the first start stops at 0. The last end may pass the end of the audio:
    fit_segments_to_audio clips it.
    """
    times = {utt: [s.start, s.end] for utt, s in segments.items()}
    by_recording: dict[str, list[str]] = {}
    for utt in sorted(segments, key=c_sort_key):
        by_recording.setdefault(segments[utt].recording, []).append(utt)
    for utts in by_recording.values():
        utts.sort(key=lambda u: times[u][0])
        times[utts[0]][0] = max(times[utts[0]][0] - by, 0.0)
        times[utts[-1]][1] += by
        for earlier, later in zip(utts, utts[1:]):
            gap = times[later][0] - times[earlier][1]
            if gap < 0:
                log.debug("segments %s and %s overlap; not extended", earlier, later)
                continue
            step = min(by, gap / 2)
            times[earlier][1] += step
            times[later][0] -= step
    return {utt: Segment(s.recording, round(times[utt][0], 2), round(times[utt][1], 2)) for utt, s in segments.items()}


def _check_pem_matches_stm(pem: list[TimedLine], stm: list[TimedLine], pem_path: Path, stm_path: Path) -> None:
    pem_ids, stm_ids = {x.utt for x in pem}, {x.utt for x in stm}
    if pem_ids == stm_ids:
        return
    only_pem, only_stm = sorted(pem_ids - stm_ids, key=c_sort_key), sorted(stm_ids - pem_ids, key=c_sort_key)
    raise InputError(
        f"segments of {pem_path} and {stm_path} do not match (Kaldi stops here too): "
        f"{len(only_pem)} only in the pem ({', '.join(only_pem[:MAX_NAMES])}), "
        f"{len(only_stm)} only in the stm ({', '.join(only_stm[:MAX_NAMES])}); use the pem and stm of the same release"
    )


def _reference_texts(stm: list[TimedLine], dropped: Counter) -> dict[str, str]:
    texts = {}
    for line in stm:
        if is_ignored_segment(line.words):
            dropped["IGNORE_TIME_SEGMENT_IN_SCORING"] += 1
            continue
        text = normalize_stm_text(line.words)
        if not text:
            dropped["no words after normalisation (only hesitations or tags)"] += 1
            continue
        if line.utt in texts:
            raise InputError(f"{line.where}: a second stm line for {line.utt}; each segment must appear once")
        texts[line.utt] = text
    return texts


def _read_verbatim(path: Path) -> str:
    return read_text(path)


def recordings_without_audio(segments: dict[str, Segment], sph: dict[str, Path]) -> set[str]:
    no_audio = {s.recording for s in segments.values() if s.recording.rsplit("-", 1)[0] not in sph}
    if no_audio:
        names = ", ".join(sorted(no_audio, key=c_sort_key)[:MAX_NAMES])
        log.warning("skipped the segments of %d recordings with no audio file: %s", len(no_audio), names)
    return no_audio


def _assemble(texts: dict[str, str], segments: dict[str, Segment], sph: dict[str, Path], dropped: Counter) -> DataDir:
    """Utterances with text and audio; their recordings in Kaldi's sph2pipe form."""
    no_audio = recordings_without_audio(segments, sph)
    d = DataDir()
    for utt in sorted(texts, key=c_sort_key):
        if segments[utt].recording in no_audio:
            dropped["recording has no audio file"] += 1
            continue
        d.text[utt], d.segments[utt], d.utt2spk[utt] = texts[utt], segments[utt], segments[utt].recording
    for recording in sorted(set(d.utt2spk.values())):
        conv, side = recording.rsplit("-", 1)
        d.wav_scp[recording] = sph2pipe_command(sph[conv], 1 if side == "A" else 2)
        d.reco2file_and_channel[recording] = (conv, side)
    return d


def prepare_eval2000(
    eval2000_dir: str | os.PathLike, eval2000_text_dir: str | os.PathLike, max_unreadable: float = 1.0
) -> DataDir:
    """The Hub5-2000 evaluation data dir (SWB `sw_` and CallHome `en_` parts together), with the
    fixed stm and the GLM for scoring. What is left out is counted and logged."""
    missing = missing_eval2000_inputs(eval2000_dir, eval2000_text_dir)
    if missing:
        raise InputError("Hub5-2000 corpus incomplete:\n  " + "\n  ".join(missing) + "\n" + LAYOUT)
    pem_path, stm_path = speech_dir(eval2000_dir) / PEM, text_dir(eval2000_text_dir) / STM
    pem, stm = read_pem(pem_path), read_reference(stm_path)
    _check_pem_matches_stm(pem, stm, pem_path, stm_path)
    dropped: Counter = Counter()
    texts = _reference_texts(stm, dropped)
    segments = extend_segments({x.utt: Segment(x.recording, x.start, x.end) for x in pem})
    d = _assemble(texts, segments, find_eval2000_sph(eval2000_dir), dropped)
    d.verbatim = {"stm": fix_stm(_read_verbatim(stm_path)), "glm": _read_verbatim(text_dir(eval2000_text_dir) / GLM)}
    for reason, count in sorted(dropped.items()):
        log.info("eval2000: left out %d segments: %s", count, reason)
    d, _, _ = fit_segments_to_audio(d, max_unreadable=max_unreadable)
    log.info("eval2000: %d utterances from %d conversation sides", len(d.utt2spk), len(d.wav_scp))
    return d
