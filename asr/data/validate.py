"""Check a Kaldi data dir: what Kaldi's utils/validate_data_dir.sh checks, and more.

Kaldi stops at the first problem; we collect them all, each naming the file and line, so one
run shows everything to fix. Beyond Kaldi: speaker ids must be prefixes of utterance ids,
transcripts must be non-empty, segments must lie inside the recording's real duration (from
the audio header), every audio file must be readable and not truncated (SPHERE header versus
file size), and a sample of files is decoded in full.

A wav.scp entry that is a command (`cmd |`, other than the sph2pipe and sox forms read
natively) is not run unless --run-commands is given: validating a data dir must not execute
what it contains (asr.data.commands). Such entries are listed as notes, unchecked.

    python -m asr.data.validate data/train [data/eval2000 ...] [--no-audio] [--run-commands]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import soundfile as sf

from asr.data.audio import SEGMENT_END_TOLERANCE_S, parse_wav_scp_entry, read_recording, shell_command
from asr.data.datadir import c_sort_key
from asr.data.sphere import is_sphere, read_sphere_header, sphere_size_problem
from asr.utils.errors import InputError

# Tables keyed by utterance that, when present, must cover exactly the utterances of utt2spk.
UTT_TABLES = ("text", "segments", "utt2dur", "feats.scp", "utt2num_frames", "utt2uniq", "utt2lang", "vad.scp")
SPK_TABLES = ("spk2gender",)
ALL_TABLES = ("utt2spk", "spk2utt", "wav.scp", "reco2file_and_channel", "cmvn.scp", "reco2dur") + UTT_TABLES + SPK_TABLES
# Kaldi's validate_data_dir.sh refuses these in text: they are the LM's sentence markers.
ILLEGAL_TEXT_SYMBOLS = ("<s>", "</s>", "#0")
MAX_EXAMPLES = 5  # per check and file; the rest is summarised in one line
FULL_READS = 5  # audio files decoded completely (evenly spread), the others header-only
DURATION_MISMATCH_S = 0.02


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.message}"


@dataclass
class Row:
    line: int
    key: str
    value: str


@dataclass
class Table:
    """The lines of one table file as written, duplicates and disorder included."""

    path: Path
    rows: list[Row] = field(default_factory=list)

    def first(self) -> dict[str, Row]:
        out: dict[str, Row] = {}
        for row in self.rows:
            out.setdefault(row.key, row)
        return out

    def keys(self) -> set[str]:
        return {row.key for row in self.rows}


def read_rows(path: Path) -> tuple[list[Row], list[Problem]]:
    """Split a table file into rows, reporting encoding, blank-line and newline problems."""
    raw = path.read_bytes()
    rows: list[Row] = []
    problems: list[Problem] = []
    if not raw:
        return rows, [Problem(str(path), None, "empty file; a data dir table needs at least one line")]
    lines = raw.split(b"\n")
    if lines[-1] != b"":
        problems.append(Problem(str(path), len(lines), "last line does not end with a newline"))
    else:
        lines.pop()
    for lineno, data in enumerate(lines, 1):
        try:
            line = data.decode("utf-8")
        except UnicodeDecodeError:
            problems.append(Problem(str(path), lineno, "not valid UTF-8"))
            continue
        if line.endswith("\r"):
            problems.append(Problem(str(path), lineno, "Windows line ending (\\r); convert the file with dos2unix"))
            line = line.rstrip("\r")
        if not line.strip():
            problems.append(Problem(str(path), lineno, "empty line; each line must be 'key value'"))
            continue
        if line[0].isspace():
            problems.append(Problem(str(path), lineno, "line starts with white space; the key must come first"))
        parts = line.split(maxsplit=1)
        rows.append(Row(lineno, parts[0], parts[1].strip() if len(parts) > 1 else ""))
    return rows, problems


def _order_problems(table: Table) -> list[Problem]:
    """Kaldi requires keys sorted with LC_ALL=C and unique."""
    problems, seen = [], {}
    previous: str | None = None
    unsorted = 0
    for row in table.rows:
        if row.key in seen:
            problems.append(Problem(str(table.path), row.line, f"duplicate key {row.key!r} (first on line {seen[row.key]})"))
        else:
            seen[row.key] = row.line
        if previous is not None and c_sort_key(row.key) < c_sort_key(previous):
            unsorted += 1
            if unsorted == 1:
                problems.append(
                    Problem(
                        str(table.path),
                        row.line,
                        f"not sorted in C locale: {row.key!r} comes after {previous!r}; "
                        "sort with `LC_ALL=C sort` or run python -m asr.data.fix",
                    )
                )
        previous = row.key
    return problems


def _capped(problems: list[Problem], what: str) -> list[Problem]:
    """At most MAX_EXAMPLES problems of one kind, plus a line saying how many were left out."""
    if len(problems) <= MAX_EXAMPLES:
        return problems
    rest = len(problems) - MAX_EXAMPLES
    return problems[:MAX_EXAMPLES] + [Problem(problems[0].file, None, f"... and {rest} more {what}")]


@dataclass
class RecordingProbe:
    """What the header of one wav.scp entry says; `problem` is None when it is readable."""

    duration: float | None
    problem: str | None = None
    audio_path: str | None = None
    compressed: bool = False
    not_run: str | None = None  # the command that would have to run to know (not allowed to)


def probe_recording(wav_value: str, run_commands: bool = True) -> RecordingProbe:
    """Duration from the audio header (SPHERE parsed directly), and whether the file is intact.
    An entry that runs a command is only run with run_commands (else `not_run` says which)."""
    command = shell_command(wav_value)
    if command is not None and not run_commands:
        return RecordingProbe(None, not_run=command)
    source = parse_wav_scp_entry(wav_value)
    if source.path is None:
        return _probe_pipe(wav_value)
    path = source.path
    if not Path(path).is_file():
        return RecordingProbe(None, f"audio file not found: {path}", path)
    try:
        if is_sphere(path):
            return _probe_sphere(path, source.channel)
        info = sf.info(path)
    except (InputError, sf.LibsndfileError, RuntimeError, OSError) as err:
        return RecordingProbe(None, f"cannot read audio header of {path}: {err}", path)
    if source.channel >= info.channels:
        return RecordingProbe(None, f"{path}: channel {source.channel + 1} requested but the file has {info.channels}", path)
    return RecordingProbe(info.frames / info.samplerate, None, path)


def _probe_sphere(path: str, channel: int) -> RecordingProbe:
    header = read_sphere_header(path)
    if channel >= header.channel_count:
        return RecordingProbe(None, f"{path}: channel {channel + 1} requested but the file has {header.channel_count}", path)
    size_problem = sphere_size_problem(path, header)
    if size_problem:
        return RecordingProbe(header.duration, f"{path}: {size_problem}", path)
    return RecordingProbe(header.duration, None, path, compressed=header.compressed)


def _probe_pipe(wav_value: str) -> RecordingProbe:
    """A command's output has no header to read: decode it (this is the only way to know)."""
    try:
        samples, rate = read_recording(wav_value)
    except InputError as err:
        return RecordingProbe(None, str(err))
    return RecordingProbe(len(samples) / rate)


def full_read_problem(probe: RecordingProbe, wav_value: str) -> str | None:
    """Decode the whole recording and compare its length with the header's."""
    try:
        samples, rate = read_recording(wav_value)
    except InputError as err:
        hint = " (shorten-compressed SPHERE: decompress it with sph2pipe first)" if probe.compressed else ""
        return f"{err}{hint}"
    if probe.duration is not None and abs(len(samples) / rate - probe.duration) > 1.0 / rate:
        return f"{probe.audio_path}: decoded {len(samples) / rate:.2f}s but the header says {probe.duration:.2f}s"
    return None


def full_read_sample(paths: list[str], count: int = FULL_READS) -> set[str]:
    """Evenly spread choice of `count` files (first and last included): deterministic."""
    if len(paths) <= count:
        return set(paths)
    if count <= 0:
        return set()
    step = (len(paths) - 1) / max(count - 1, 1)
    return {paths[round(i * step)] for i in range(count)}


class _Validator:
    def __init__(self, path: Path, check_audio: bool, full_reads: int, run_commands: bool = False):
        self.dir = path
        self.check_audio = check_audio
        self.full_reads = full_reads
        self.run_commands = run_commands
        self.problems: list[Problem] = []
        self.notes: list[Problem] = []  # what was not checked, and why
        self.tables: dict[str, Table] = {}

    def file(self, name: str) -> str:
        return str(self.dir / name)

    def add(self, problems: list[Problem], what: str = "like this") -> None:
        self.problems.extend(_capped(problems, what))

    def flag(self, name: str, message_of: Callable[[Row], str | None], what: str) -> None:
        """A problem for each line of table `name` that `message_of` has something to say about."""
        if name in self.tables:
            table = self.tables[name]
            self.add([Problem(str(table.path), r.line, m) for r in table.rows if (m := message_of(r))], what)

    def flag_missing(self, name: str, expected: set[str], what: str) -> None:
        """One problem listing the keys of `expected` that table `name` lacks."""
        missing = sorted(expected - self.tables[name].keys(), key=c_sort_key)
        if missing:
            shown = ", ".join(missing[:MAX_EXAMPLES]) + (" ..." if len(missing) > MAX_EXAMPLES else "")
            self.problems.append(Problem(self.file(name), None, f"{len(missing)} {what} have no line here: {shown}"))

    def run(self) -> list[Problem]:
        if not self.dir.is_dir():
            return [Problem(str(self.dir), None, "data directory not found; run python -m asr.data.prepare first")]
        self.check_required_files()
        self.read_tables()
        if "utt2spk" in self.tables:
            self.check_line_shapes()
            self.check_speakers()
            self.check_utterance_sets()
            self.check_text()
        if "wav.scp" in self.tables:
            self.check_recordings()
        self.check_utt2dur_against_segments()
        if self.check_audio and "wav.scp" in self.tables:
            self.check_audio_files()
        return self.problems

    def check_required_files(self) -> None:
        for name, why in (
            ("utt2spk", "every data dir needs utt2spk"),
            ("spk2utt", "regenerate it from utt2spk with python -m asr.data.fix"),
            ("text", "every data dir needs transcripts"),
        ):
            if not (self.dir / name).is_file():
                self.problems.append(Problem(self.file(name), None, f"missing; {why}"))
        if not (self.dir / "wav.scp").is_file() and not (self.dir / "feats.scp").is_file():
            message = "missing (and no feats.scp); a data dir needs audio or features"
            self.problems.append(Problem(self.file("wav.scp"), None, message))
        if (self.dir / "segments").is_file() and not (self.dir / "wav.scp").is_file():
            self.problems.append(Problem(self.file("segments"), None, "segments exists but wav.scp does not"))

    def read_tables(self) -> None:
        for name in ALL_TABLES:
            path = self.dir / name
            if not path.is_file():
                continue
            rows, problems = read_rows(path)
            table = Table(path, rows)
            self.tables[name] = table
            self.add(problems, f"format problems in {name}")
            self.add(_order_problems(table), f"duplicate keys in {name}")

    def check_line_shapes(self) -> None:
        """Per line: utt2spk 2 fields, segments 4 with 0 <= start < end, and so on."""
        self.flag("utt2spk", _utt2spk_line_problem, "malformed utt2spk lines")
        self.flag("segments", segment_line_problem, "bad segments")
        self.flag("reco2file_and_channel", _r2fc_line_problem, "malformed reco2file_and_channel lines")
        for name in ("utt2dur", "reco2dur"):
            self.flag(name, _duration_line_problem, f"bad {name} lines")

    def check_speakers(self) -> None:
        self.flag("utt2spk", _speaker_prefix_problem, "utterances without their speaker prefix")
        utt2spk = {r.key: r.value.split()[0] for r in self.tables["utt2spk"].rows if r.value}
        if "spk2utt" in self.tables:
            self._check_spk2utt(utt2spk)
        if "cmvn.scp" in self.tables and self.tables["cmvn.scp"].keys() not in (set(utt2spk.values()), set(utt2spk), {"global"}):
            self.problems.append(Problem(self.file("cmvn.scp"), None,
                                         "keys are neither the speakers, the utterances, nor 'global'; recompute CMVN"))

    def _check_spk2utt(self, utt2spk: dict[str, str]) -> None:
        """spk2utt must be utt2spk inverted: every utterance once, under its own speaker."""
        path = self.file("spk2utt")
        found, problems = set(), []
        for row in self.tables["spk2utt"].rows:
            for utt in row.value.split():
                if utt in found:
                    problems.append(Problem(path, row.line, f"utterance {utt!r} listed twice"))
                elif utt2spk.get(utt) != row.key:
                    said = f"utt2spk says {utt2spk[utt]!r}" if utt in utt2spk else "it is not in utt2spk"
                    problems.append(Problem(path, row.line, f"utterance {utt!r} listed under speaker {row.key!r} but {said}"))
                found.add(utt)
        missing = sorted(set(utt2spk) - found, key=c_sort_key)
        problems += [Problem(path, None, f"utterance {u!r} of utt2spk is missing (speaker {utt2spk[u]!r})") for u in missing]
        self.add(problems, "spk2utt mismatches")
        if problems:
            self.problems.append(Problem(path, None, "spk2utt does not match utt2spk; regenerate it with python -m asr.data.fix"))

    def check_utterance_sets(self) -> None:
        """Every utterance table covers exactly the utterances of utt2spk (Kaldi compares the lists)."""
        utts = self.tables["utt2spk"].keys()
        names = UTT_TABLES if "segments" in self.tables else UTT_TABLES + ("wav.scp",)  # else wav.scp is per utterance
        def unknown_utterance(row: Row) -> str | None:
            return None if row.key in utts else f"utterance {row.key!r} is not in utt2spk"

        for name in (n for n in names if n in self.tables):
            self.flag(name, unknown_utterance, f"utterances of {name} not in utt2spk")
            self.flag_missing(name, utts, "utterances of utt2spk")

    def check_text(self) -> None:
        self.flag("text", lambda r: None if r.value else f"utterance {r.key!r} has an empty transcript", "empty transcripts")
        self.flag("text", _illegal_symbol_problem, "lines with illegal symbols")

    def check_recordings(self) -> None:
        """segments name recordings of wav.scp and use all of them; reco2file_and_channel matches."""
        recordings = self.tables["wav.scp"].keys()

        def unknown_recording(row: Row) -> str | None:
            return None if row.key in recordings else f"recording {row.key!r} is not in wav.scp"

        if "segments" in self.tables:
            used = {r.value.split()[0] for r in self.tables["segments"].rows if r.value}
            self.flag("segments", lambda r: _unknown_recording_problem(r, recordings), "segments naming unknown recordings")
            self.flag("wav.scp", lambda r: None if r.key in used else f"recording {r.key!r} is used by no segment",
                      "unused recordings")
        if "reco2file_and_channel" in self.tables:
            self.flag("reco2file_and_channel", unknown_recording, "reco2file_and_channel keys not in wav.scp")
            self.flag_missing("reco2file_and_channel", recordings, "recordings of wav.scp")

    def check_utt2dur_against_segments(self) -> None:
        if "utt2dur" in self.tables and "segments" in self.tables:
            segments = self.tables["segments"].first()
            self.flag("utt2dur", lambda r: _duration_mismatch(r, segments.get(r.key)), "utt2dur values disagreeing with segments")

    def check_audio_files(self) -> None:
        """Header of every recording; full decode of a sample; segments inside the real duration."""
        wav_rows = self.tables["wav.scp"].first()
        probes = {key: probe_recording(row.value, self.run_commands) for key, row in wav_rows.items()}
        self.flag("wav.scp", lambda r: probes[r.key].problem if wav_rows[r.key] is r else None, "unreadable recordings")
        not_run = [Problem(self.file("wav.scp"), row.line, f"a command, not run, so its audio is unchecked: {probes[key].not_run}")
                   for key, row in wav_rows.items() if probes[key].not_run]
        self.notes.extend(_capped(not_run, "commands not run (--run-commands runs them; a data dir is trusted code)"))
        self._decode_sample(wav_rows, probes)
        durations = {key: p.duration for key, p in probes.items() if p.duration is not None}
        self.flag("segments", lambda r: _segment_end_problem(r, durations), "segments past the end of their recording")
        if "segments" not in self.tables:  # then an utterance is a whole recording
            self.flag("utt2dur", lambda r: _recording_duration_mismatch(r, durations.get(r.key)),
                      "utt2dur values disagreeing with the audio")

    def _decode_sample(self, wav_rows: dict[str, Row], probes: dict[str, RecordingProbe]) -> None:
        """Decode a few files completely (one row per file: both sides of a conversation share it)."""
        by_path: dict[str, Row] = {}
        for key, row in wav_rows.items():
            if probes[key].problem is None and probes[key].not_run is None:
                by_path.setdefault(probes[key].audio_path or row.value, row)
        problems = []
        for path in sorted(full_read_sample(sorted(by_path), self.full_reads)):
            row = by_path[path]
            message = full_read_problem(probes[row.key], row.value)
            if message:
                problems.append(Problem(self.file("wav.scp"), row.line, message))
        self.add(problems, "undecodable recordings")


# --- per-line checks: a message when the line is wrong, else None ---


def _utt2spk_line_problem(row: Row) -> str | None:
    return None if len(row.value.split()) == 1 else f"expected 'utterance speaker', got {row.key} {row.value!r}"


def segment_line_problem(row: Row) -> str | None:
    fields = row.value.split()
    try:
        start, end = float(fields[1]), float(fields[2])
    except (IndexError, ValueError):
        return f"expected '<utt> <recording> <start> <end>', got {row.key} {row.value!r}"
    if len(fields) != 3 or not (0 <= start < end) or not math.isfinite(end):
        return f"bad times for {row.key}: start {start} end {end} (need 0 <= start < end)"
    return None


def _r2fc_line_problem(row: Row) -> str | None:
    fields = row.value.split()
    if len(fields) == 2 and fields[1] in ("A", "B"):
        return None
    return f"expected '<recording> <file> <A|B>', got {row.key} {row.value!r}"


def _positive_number(value: str) -> bool:
    try:
        return float(value) > 0 and math.isfinite(float(value))
    except ValueError:
        return False


def _duration_line_problem(row: Row) -> str | None:
    return None if _positive_number(row.value) else f"duration must be a positive number, got {row.value!r}"


def _speaker_prefix_problem(row: Row) -> str | None:
    speaker = row.value.split()[0] if row.value else ""
    if not speaker or row.key.startswith(speaker):
        return None
    return (f"utterance {row.key!r} does not start with its speaker id {speaker!r}; Kaldi needs speaker ids "
            "as prefixes of utterance ids so that sorting by either gives the same order")


def _illegal_symbol_problem(row: Row) -> str | None:
    illegal = [s for s in ILLEGAL_TEXT_SYMBOLS if s in row.value.split()]
    return f"illegal symbol {illegal[0]!r} (reserved for the language model)" if illegal else None


def _unknown_recording_problem(row: Row, recordings: set[str]) -> str | None:
    recording = row.value.split()[0] if row.value else ""
    return None if recording in recordings else f"recording {recording!r} of {row.key} is not in wav.scp"


def _duration_mismatch(row: Row, segment: Row | None) -> str | None:
    if segment is None or not _positive_number(row.value) or segment_line_problem(segment):
        return None
    _, start, end = segment.value.split()
    length = float(end) - float(start)
    if abs(float(row.value) - length) <= DURATION_MISMATCH_S:
        return None
    return f"{row.key}: {row.value}s but its segment lasts {length:.3f}s"


def _recording_duration_mismatch(row: Row, duration: float | None) -> str | None:
    if duration is None or not _positive_number(row.value) or abs(float(row.value) - duration) <= DURATION_MISMATCH_S:
        return None
    return f"{row.key}: {row.value}s but the audio lasts {duration:.3f}s"


def _segment_end_problem(row: Row, durations: dict[str, float]) -> str | None:
    if segment_line_problem(row):
        return None
    recording, _, end = row.value.split()
    duration = durations.get(recording)
    if duration is None or float(end) <= duration + SEGMENT_END_TOLERANCE_S:
        return None
    return f"{row.key} ends at {float(end):.2f}s but recording {recording} lasts {duration:.2f}s"


def validate_data_dir(path: str | os.PathLike, check_audio: bool = True, full_reads: int = FULL_READS,
                      run_commands: bool = False, notes: list[Problem] | None = None) -> list[Problem]:
    """All problems of the data dir at `path` (an empty list when it is valid). Commands in
    wav.scp run only with run_commands; the entries not run are added to `notes`."""
    validator = _Validator(Path(path), check_audio, full_reads, run_commands)
    problems = validator.run()
    if notes is not None:
        notes.extend(validator.notes)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.data.validate", description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dirs", nargs="+", help="Kaldi data directories to check")
    parser.add_argument("--no-audio", action="store_true", help="skip reading audio headers and files")
    parser.add_argument("--full-reads", type=int, default=FULL_READS, help="audio files decoded completely (default %(default)s)")
    parser.add_argument("--run-commands", action="store_true",
                        help="run wav.scp entries that are commands (`cmd |`) to check their audio; a data dir is trusted code")
    args = parser.parse_args(argv)
    failed = 0
    for data_dir in args.data_dirs:
        notes: list[Problem] = []
        problems = validate_data_dir(data_dir, check_audio=not args.no_audio, full_reads=args.full_reads,
                                     run_commands=args.run_commands, notes=notes)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            failed += 1
            hint = f"; python -m asr.data.fix {data_dir} repairs most of them" if Path(data_dir).is_dir() else ""
            print(f"{data_dir}: {len(problems)} problems{hint}", file=sys.stderr)
        else:
            unchecked = f" ({len(notes)} notes above: not everything could be checked)" if notes else ""
            print(f"{data_dir}: valid{unchecked}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
