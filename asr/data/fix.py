"""Repair a Kaldi data dir: what Kaldi's utils/fix_data_dir.sh does, and more.

Sorts every table (C locale) and keeps the first line of a repeated key; keeps only the
utterances present in every table (utt2spk, text, segments, feats.scp, and wav.scp when there
are no segments); drops utterances with an empty transcript, bad segment times, a recording
that is missing or unreadable, or a segment past the end of its audio; then drops the
recordings and speakers no utterance uses and regenerates spk2utt. The new dir replaces the
old in one rename; the old tables are kept in `<dir>/.backup/`, as Kaldi does.

A wav.scp entry that is a command (`cmd |`, other than the sph2pipe and sox forms read
natively) is not run unless --run-commands is given (asr.kaldi.commands); its utterances are
kept unchecked, and the report says so.

    python -m asr.data.fix data/train [--no-audio] [--run-commands]
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import shutil
import sys
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Iterator

from asr.data.audio import SEGMENT_END_TOLERANCE_S
from asr.data.datadir import TABLE_FILES, VERBATIM_FILES, DataDir, Utterance, write_data_dir
from asr.data.validate import DURATION_MISMATCH_S, Problem, RecordingProbe, probe_recording, validate_data_dir
from asr.kaldi.segments import Segment, positive_duration, valid_segment
from asr.kaldi.table import Row, c_sort_key, iter_table
from asr.utils.atomic import atomic_dir
from asr.utils.errors import InputError

log = logging.getLogger(__name__)

# Kaldi's extract-segments --max-overshoot: a segment ending less than this past the audio is
# clipped to the audio, one ending further is dropped.
MAX_OVERSHOOT_S = 0.5
# Optional tables carried along, filtered to the utterances (or speakers) kept.
EXTRA_UTT_TABLES = ("utt2num_frames", "utt2uniq", "utt2lang", "vad.scp")
EXTRA_SPK_TABLES = ("spk2gender",)
BACKUP = ".backup"
SIDE_RECORDING = re.compile(r"^(.+)-([AB])$")


@dataclass
class FixReport:
    path: str
    utts_before: int
    utts_after: int = 0
    recordings_before: int = 0
    recordings_after: int = 0
    speakers_before: int = 0
    speakers_after: int = 0
    dropped: Counter = field(default_factory=Counter)  # reason -> utterances dropped for it
    repairs: list[str] = field(default_factory=list)  # what was changed without dropping utterances
    remaining: list[Problem] = field(default_factory=list)  # what the fixer cannot repair

    def summary(self) -> str:
        lines = [
            f"{self.path}: kept {self.utts_after} of {self.utts_before} utterances, "
            f"{self.recordings_after} of {self.recordings_before} recordings, "
            f"{self.speakers_after} of {self.speakers_before} speakers"
        ]
        lines += [f"  dropped {n} utterances: {reason}" for reason, n in sorted(self.dropped.items())]
        lines += [f"  {repair}" for repair in self.repairs]
        lines += [f"  still wrong: {problem}" for problem in self.remaining]
        return "\n".join(lines)


# --- segments against the audio (also used by the corpus preparers) ---


def _fit_segment(segment: Segment, duration: float, max_overshoot: float) -> Segment | None:
    """The segment inside [0, duration], clipped if it overshoots a little; None if it cannot be."""
    if segment.end <= duration + SEGMENT_END_TOLERANCE_S:
        return segment
    if segment.end - duration > max_overshoot:
        return None
    end = math.floor(duration * 100) / 100  # the data dir keeps centiseconds; stay inside
    return Segment(segment.recording, segment.start, end) if end > segment.start else None


class AudioFit:
    """Segments fitted to their audio one utterance at a time, for a corpus too large to hold.

    `fit` says what becomes of an utterance's segment; `finish`, once all are seen, names the
    unreadable recordings, stops when more than `max_unreadable` (a share) of them are, and logs
    what was dropped and clipped. Recordings are probed as their first utterance comes, unless
    `probes` are given.
    """

    def __init__(
        self,
        wav_scp: dict[str, str],
        probes: dict[str, RecordingProbe] | None = None,
        max_overshoot: float = MAX_OVERSHOOT_S,
        max_unreadable: float = 1.0,
    ):
        self.wav_scp, self.probes = wav_scp, probes if probes is not None else {}
        self.max_overshoot, self.max_unreadable = max_overshoot, max_unreadable
        self.dropped: Counter = Counter()
        self.clipped = 0

    def _probe(self, recording: str) -> RecordingProbe | None:
        if recording not in self.probes and recording in self.wav_scp:
            self.probes[recording] = probe_recording(self.wav_scp[recording])
        return self.probes.get(recording)

    def fit(self, recording: str, segment: Segment | None) -> tuple[bool, Segment | None]:
        """(whether the utterance stays, its segment fitted to the audio: None without segments)."""
        probe = self._probe(recording)
        if probe is not None and probe.not_run:
            return True, segment
        if probe is None or probe.problem or probe.duration is None:
            self.dropped["recording missing or unreadable"] += 1
            return False, None
        if segment is None:
            return True, None
        fitted = _fit_segment(segment, probe.duration, self.max_overshoot)
        if fitted is None:
            self.dropped["segment past the end of the audio"] += 1
            return False, None
        self.clipped += fitted != segment
        return True, fitted

    def fitted(self, utterances: Iterable[Utterance]) -> Iterator[Utterance]:
        """The utterances that stay, with their segments fitted."""
        for u in utterances:
            kept, segment = self.fit(u.segment.recording, u.segment)
            if kept:
                yield u if segment == u.segment else replace(u, segment=segment)

    def finish(self) -> None:
        unreadable = sorted((r for r, p in self.probes.items() if p.problem), key=c_sort_key)
        for reco in unreadable:
            log.warning("recording %s is unreadable, its utterances are dropped: %s", reco, self.probes[reco].problem)
        _check_unreadable_share(unreadable, self.probes, self.max_unreadable)
        for reason, count in sorted(self.dropped.items()):
            log.info("dropped %d utterances: %s", count, reason)
        if self.clipped:
            log.info(
                "clipped the end of %d segments to their audio (by at most %.1fs)", self.clipped, self.max_overshoot
            )


def fit_segments_to_audio(
    d: DataDir,
    probes: dict[str, RecordingProbe] | None = None,
    max_overshoot: float = MAX_OVERSHOOT_S,
    max_unreadable: float = 1.0,
) -> tuple[DataDir, Counter, list[str]]:
    """Drop utterances whose recording is unreadable or whose segment lies past its audio.

    Returns the new data dir, the number of utterances dropped per reason, and the
    utterances whose segment end was clipped to the audio (by at most `max_overshoot`).
    More than `max_unreadable` (a share) of the recordings unreadable is an InputError: a
    broken corpus copy, not a few damaged files. Recordings whose command was not run
    (probe.not_run) keep their utterances as they are.
    """
    if probes is None:
        probes = {reco: probe_recording(value) for reco, value in d.wav_scp.items()}
    fit = AudioFit(d.wav_scp, probes, max_overshoot, max_unreadable)
    keep, segments, clipped = [], dict(d.segments), []
    for utt in d.utts:
        kept, segment = fit.fit(d.recording_of(utt), d.segments.get(utt))
        if not kept:
            continue
        keep.append(utt)
        if segment is not None and segment != d.segments[utt]:
            clipped.append(utt)
            segments[utt] = segment
    fit.finish()
    fitted_dir = d.subset(keep)
    fitted_dir.segments = {u: segments[u] for u in fitted_dir.segments}
    return fitted_dir, fit.dropped, clipped


def _check_unreadable_share(unreadable: list[str], probes: dict[str, RecordingProbe], max_share: float) -> None:
    if not probes or len(unreadable) / len(probes) <= max_share:
        return
    first = unreadable[0]
    raise InputError(
        f"{len(unreadable)} of {len(probes)} recordings are unreadable ({len(unreadable) / len(probes):.0%}, more than "
        f"data.max_unreadable={max_share:g}), the first {first}: {probes[first].problem}; fix the corpus copy, "
        "or raise data.max_unreadable to go on without them"
    )


# --- reading a damaged data dir leniently ---


@dataclass
class _LenientDir:
    """The tables of a data dir as dicts (first line of a repeated key wins), with what was off."""

    path: Path
    tables: dict[str, dict[str, str]] = field(default_factory=dict)
    repairs: list[str] = field(default_factory=list)

    def read(self, name: str) -> dict[str, str] | None:
        path = self.path / name
        if not path.is_file():
            return None
        bad_lines: list[int] = []
        rows = list(iter_table(path, on_bad_line=lambda line, message: bad_lines.append(line)))
        table: dict[str, str] = {}
        for row in rows:
            table.setdefault(row.key, row.value)
        self._note(name, rows, sum(line is not None for line in bad_lines), len(rows) - len(table))
        self.tables[name] = table
        return table

    def _note(self, name: str, rows: list[Row], bad_lines: int, duplicates: int) -> None:
        keys = [c_sort_key(r.key) for r in rows]
        if keys != sorted(keys):
            self.repairs.append(f"{name}: sorted")
        if duplicates:
            self.repairs.append(f"{name}: removed {duplicates} repeated keys (kept the first line of each)")
        if bad_lines:
            self.repairs.append(f"{name}: rewrote {bad_lines} badly formatted lines (blank, CR, no final newline)")


def _load(src: _LenientDir) -> DataDir:
    """A DataDir from whatever tables are present (spk2utt is ignored: it is regenerated)."""
    d = DataDir()
    d.utt2spk = {u: v for u, v in (src.read("utt2spk") or {}).items() if len(v.split()) == 1}
    d.text = src.read("text") or {}
    d.wav_scp = {r: v for r, v in (src.read("wav.scp") or {}).items() if v}
    d.feats_scp = src.read("feats.scp") or {}
    d.cmvn_scp = src.read("cmvn.scp") or {}
    segments = src.read("segments")
    if segments is not None:
        d.segments = {u: s for u, v in segments.items() if (s := valid_segment(u, v)) is not None}
    r2fc = src.read("reco2file_and_channel") or {}
    d.reco2file_and_channel = {r: tuple(v.split()) for r, v in r2fc.items() if len(v.split()) == 2}  # type: ignore[misc]
    d.utt2dur = {u: x for u, v in (src.read("utt2dur") or {}).items() if (x := positive_duration(v)) is not None}
    for name in VERBATIM_FILES:
        if (src.path / name).is_file():
            d.verbatim[name] = (src.path / name).read_text(encoding="utf-8")
    for name in EXTRA_UTT_TABLES + EXTRA_SPK_TABLES:
        src.read(name)
    return d


# --- deciding which utterances stay ---


def _drop_reason(utt: str, d: DataDir, src: _LenientDir) -> str | None:
    """Why `utt` cannot stay (the first reason that applies), or None."""
    raw = src.tables
    if utt not in d.text:
        return "no transcript in text"
    if not d.text[utt].strip():
        return "empty transcript"
    if "segments" in raw:
        if utt not in raw["segments"]:
            return "no line in segments"
        if utt not in d.segments:
            return "bad segment times"
        if d.segments[utt].recording not in d.wav_scp:
            return "recording not in wav.scp"
    elif "wav.scp" in raw and utt not in d.wav_scp:
        return "no line in wav.scp"
    if "feats.scp" in raw and utt not in d.feats_scp:
        return "no line in feats.scp"
    return None


def _select_utterances(d: DataDir, src: _LenientDir, report: FixReport) -> DataDir:
    keep = []
    malformed = set(src.tables["utt2spk"]) - set(d.utt2spk)
    if malformed:
        report.dropped["malformed utt2spk line"] += len(malformed)
    for name in ("text", "segments", "feats.scp", "utt2dur") + EXTRA_UTT_TABLES:
        strays = set(src.tables.get(name, {})) - set(src.tables["utt2spk"])
        if strays:
            report.repairs.append(f"{name}: removed {len(strays)} lines of utterances not in utt2spk")
    for utt in d.utts:
        reason = _drop_reason(utt, d, src)
        if reason:
            report.dropped[reason] += 1
        else:
            keep.append(utt)
    return d.subset(keep)


def _complete_reco2file_and_channel(d: DataDir, report: FixReport) -> None:
    """Entries missing for a recording are derived from Switchboard-style ids (sw02001-A)."""
    if not d.reco2file_and_channel:
        return
    for reco in set(d.wav_scp) - set(d.reco2file_and_channel):
        match = SIDE_RECORDING.match(reco)
        if not match:
            report.repairs.append(f"reco2file_and_channel: removed (no entry for {reco} and none can be derived)")
            d.reco2file_and_channel = {}
            return
        d.reco2file_and_channel[reco] = (match.group(1), match.group(2))
        report.repairs.append(f"reco2file_and_channel: added {reco}")


def _complete_utt2dur(d: DataDir, probes: dict[str, RecordingProbe] | None, report: FixReport) -> None:
    """utt2dur follows the segments (or the recording, without segments); missing entries are refilled."""
    if not d.utt2dur:
        return
    corrected = 0
    for utt in d.utts:
        if d.segments:
            expected = round(d.segments[utt].end - d.segments[utt].start, 3)
        elif probes and utt in probes and probes[utt].duration:
            expected = probes[utt].duration
        else:
            continue
        if utt not in d.utt2dur or abs(d.utt2dur[utt] - expected) > DURATION_MISMATCH_S:
            d.utt2dur[utt] = expected
            corrected += 1
    if corrected:
        report.repairs.append(f"utt2dur: set {corrected} durations from the segments or audio")
    if set(d.utt2dur) != set(d.utt2spk):
        report.repairs.append("utt2dur: removed (durations unknown for some utterances; run without --no-audio)")
        d.utt2dur = {}


def _filter_cmvn(d: DataDir) -> None:
    keys = set(d.utt2spk) | set(d.utt2spk.values()) | {"global"}
    d.cmvn_scp = {k: v for k, v in d.cmvn_scp.items() if k in keys}


def _extra_tables(d: DataDir, src: _LenientDir) -> None:
    """utt2num_frames, spk2gender, ...: filtered and written sorted (as verbatim files)."""
    speakers = set(d.utt2spk.values())
    for name in EXTRA_UTT_TABLES + EXTRA_SPK_TABLES:
        if name not in src.tables:
            continue
        keys = set(d.utt2spk) if name in EXTRA_UTT_TABLES else speakers
        table = {k: v for k, v in src.tables[name].items() if k in keys}
        d.verbatim[name] = "".join(f"{k} {v}\n" for k, v in sorted(table.items(), key=lambda kv: c_sort_key(kv[0])))


# --- writing ---


def _write_fixed(d: DataDir, path: Path, written_before: set[str]) -> None:
    """Replace the dir in one rename; other files are carried over, old tables go to .backup/."""
    tables = set(TABLE_FILES) | {"spk2utt"} | set(VERBATIM_FILES) | set(EXTRA_UTT_TABLES) | set(EXTRA_SPK_TABLES)
    with atomic_dir(path) as tmp:
        write_data_dir(d, tmp)
        for name in ("wav.scp", "text"):  # write_data_dir always writes these; keep absent ones absent
            if name not in written_before and not (tmp / name).stat().st_size:
                (tmp / name).unlink()
        (tmp / BACKUP).mkdir()
        for entry in path.iterdir():
            if entry.name == BACKUP:
                continue
            target = tmp / BACKUP / entry.name if entry.name in tables else tmp / entry.name
            if entry.is_dir():
                shutil.copytree(entry, target, symlinks=True)
            else:
                shutil.copy2(entry, target, follow_symlinks=False)


def fix_data_dir(path: str | os.PathLike, check_audio: bool = True, run_commands: bool = False) -> FixReport:
    """Repair the data dir at `path` in place and say what was kept and why the rest was dropped.
    wav.scp commands run only with run_commands; the utterances of the others are kept unchecked."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"{path}: data directory not found")
    if not (path / "utt2spk").is_file():
        raise InputError(f"{path / 'utt2spk'}: missing; the fixer keeps utterances by utt2spk and cannot guess it")
    src = _LenientDir(path)
    d = _load(src)
    report = FixReport(
        str(path),
        utts_before=len(src.tables["utt2spk"]),
        recordings_before=len(src.tables.get("wav.scp", {})),
        speakers_before=len(set(d.utt2spk.values())),
    )
    d = _select_utterances(d, src, report)
    probes = None
    if check_audio and d.wav_scp:
        probes = {reco: probe_recording(value, run_commands) for reco, value in d.wav_scp.items()}
        d, audio_dropped, clipped = fit_segments_to_audio(d, probes, MAX_OVERSHOOT_S)
        report.dropped.update(audio_dropped)
        if clipped:
            report.repairs.append(f"segments: clipped the end of {len(clipped)} segments to the audio")
        not_run = sorted(r for r, p in probes.items() if p.not_run and r in d.wav_scp)
        if not_run:
            report.repairs.append(
                f"wav.scp: {len(not_run)} entries are commands, not run, so their utterances are kept "
                f"unchecked (--run-commands runs them; a data dir is trusted code): {', '.join(not_run[:5])}"
            )
    if not d.utt2spk:
        raise InputError(f"{path}: no utterances would remain ({report.summary()}); not rewriting it")
    _complete_reco2file_and_channel(d, report)
    _complete_utt2dur(d, probes, report)
    _filter_cmvn(d)
    _extra_tables(d, src)
    report.repairs[:0] = src.repairs
    _write_fixed(d, path, written_before={p.name for p in path.iterdir()})
    report.utts_after, report.recordings_after, report.speakers_after = len(d.utt2spk), len(d.wav_scp), len(d.spk2utt)
    report.remaining = validate_data_dir(path, check_audio=check_audio, full_reads=0, run_commands=run_commands)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.data.fix", description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dirs", nargs="+", help="Kaldi data directories to repair in place")
    parser.add_argument(
        "--no-audio", action="store_true", help="do not read audio headers (keeps segments past the audio)"
    )
    parser.add_argument(
        "--run-commands",
        action="store_true",
        help="run wav.scp entries that are commands (`cmd |`) to check their audio; a data dir is trusted code",
    )
    args = parser.parse_args(argv)
    status = 0
    for data_dir in args.data_dirs:
        try:
            report = fix_data_dir(data_dir, check_audio=not args.no_audio, run_commands=args.run_commands)
        except InputError as err:
            print(f"error: {err}", file=sys.stderr)
            status = 2
            continue
        print(report.summary())
        if report.remaining:
            status = max(status, 1)
    return status


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    sys.exit(main())
