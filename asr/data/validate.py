"""Check a Kaldi data dir: what Kaldi's utils/validate_data_dir.sh checks, and more.

Kaldi stops at the first problem; we collect them all, each naming the file and line, so one
run shows everything to fix. Beyond Kaldi: speaker ids must be prefixes of utterance ids,
transcripts must be non-empty, segments must lie inside the recording's real duration (from
the audio header), every audio file must be readable and not truncated (SPHERE header versus
file size), and a sample of files is decoded in full.

A wav.scp entry that is a command (`cmd |`, other than the sph2pipe and sox forms read
natively) is not run unless --run-commands is given: validating a data dir must not execute
what it contains (asr.kaldi.commands). Such entries are listed as notes, unchecked.

Memory does not grow with the number of utterances: the tables must be sorted (LC_ALL=C), so each
is read line by line, and tables keyed by utterance are compared as merge-joins of sorted streams,
as Kaldi's script does with `sort -c`, `cmp` and `comm`. Only what is per recording or per speaker
is held. A table that is not sorted is sorted in memory (the data dir is invalid then anyway).

A data dir found valid gets a stage record, `<dir>/validate.record.json` (asr/utils/record.py):
the options and the tables checked. It is checked again only when a table or an option changed
(or with --force); the audio is named by wav.scp, so a recording replaced in place under the
same path is not seen without --force.

    python -m asr.data.validate data/train [data/eval2000 ...] [--no-audio] [--run-commands] [--force]
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from itertools import groupby
from operator import attrgetter
from pathlib import Path
from typing import Callable, Iterable, Iterator

import soundfile as sf

from asr.data.audio import SEGMENT_END_TOLERANCE_S, parse_wav_scp_entry, read_recording, shell_command
from asr.data.sphere import is_sphere, read_sphere_header, sphere_size_problem
from asr.kaldi.segments import positive_duration, segment_problem
from asr.kaldi.table import Row, iter_table
from asr.utils.errors import InputError
from asr.utils.record import record_path, why_rerun, write_record

# Tables keyed by utterance that, when present, must cover exactly the utterances of utt2spk.
UTT_TABLES = ("text", "segments", "utt2dur", "feats.scp", "utt2num_frames", "utt2uniq", "utt2lang", "vad.scp")
SPK_TABLES = ("spk2gender",)
ALL_TABLES = (
    ("utt2spk", "spk2utt", "wav.scp", "reco2file_and_channel", "cmvn.scp", "reco2dur") + UTT_TABLES + SPK_TABLES
)
# Kaldi's validate_data_dir.sh refuses these in text: they are the LM's sentence markers.
ILLEGAL_TEXT_SYMBOLS = ("<s>", "</s>", "#0")
MAX_EXAMPLES = 5  # per check and file; the rest is summarised in one line
FULL_READS = 5  # audio files decoded completely (evenly spread), the others header-only
DURATION_MISMATCH_S = 0.02
STAGE, RERUN = "validate", "python -m asr.data.validate"


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.message}"


Rows = Iterable[Row]
LineCheck = Callable[[Row], "str | None"]  # a message when the line is wrong, else None


class _Capped:
    """Problems of one kind: the MAX_EXAMPLES on the earliest lines (a table sorted in memory yields its
    rows out of line order), and how many there were. Memory stays bounded however many lines are wrong."""

    def __init__(self, what: str = "like this"):
        self.what, self.shown, self.total = what, [], 0

    def add(self, problem: Problem) -> None:
        self.total += 1
        self.shown = sorted(self.shown + [problem], key=lambda p: p.line or 0)[:MAX_EXAMPLES]

    def problems(self) -> list[Problem]:
        return _capped(self.shown, self.what, self.total)


def _capped(problems: list[Problem], what: str, total: int | None = None) -> list[Problem]:
    """At most MAX_EXAMPLES problems of one kind (of `total`), plus a line saying how many were left out."""
    rest = (len(problems) if total is None else total) - MAX_EXAMPLES
    return problems[:MAX_EXAMPLES] + (
        [Problem(problems[0].file, None, f"... and {rest} more {what}")] if rest > 0 else []
    )


class _KeyOrder:
    """Whether a table's keys are sorted in C locale (Kaldi requires it) and unique, seen one row at a
    time: in a sorted table a repeated key is next to its first line, so nothing else is kept."""

    def __init__(self, path: Path, name: str):
        self.path = str(path)
        self.problems = _Capped(f"duplicate keys in {name}")
        self.unsorted: Problem | None = None  # at the first key smaller than the one before
        self.first: Row | None = None  # the first row of the latest key

    def see(self, row: Row) -> None:
        first = self.first
        if first is None or row.key > first.key:  # str order is code point order: UTF-8 byte order, c_sort_key's
            self.first = row
        elif row.key == first.key:
            self.problems.add(Problem(self.path, row.line, f"duplicate key {row.key!r} (first on line {first.line})"))
        elif self.unsorted is None:
            message = (
                f"not sorted in C locale: {row.key!r} comes after {first.key!r}; "
                "sort with `LC_ALL=C sort` or run python -m asr.data.fix"
            )
            self.unsorted = Problem(self.path, row.line, message)


class _OutOfOrder(Exception):
    """A stream of rows meant to be in key order is not."""


def _in_key_order(rows: Rows) -> Iterator[Row]:
    """The rows, as long as they are in key order (else _OutOfOrder), for a stream that is not checked by scan."""
    previous = ""
    for row in rows:
        if row.key < previous:
            raise _OutOfOrder(row.key)
        previous = row.key
        yield row


def _join(*streams: Rows) -> Iterator[list]:
    """Merge-join of streams of rows in key order, as Kaldi's `comm`: [key, rows of each stream] for
    each key of any of them (an empty list where a stream lacks it). Only one key's rows are held."""
    groups = [groupby(stream, key=attrgetter("key")) for stream in streams]
    heads = [next(group, None) for group in groups]  # the (key, rows) next in each stream
    while keys := [head[0] for head in heads if head is not None]:
        key = min(keys)
        joined: list = [key]
        for i, head in enumerate(heads):
            if head is not None and head[0] == key:
                joined.append(list(head[1]))  # before groupby moves on
                heads[i] = next(groups[i], None)
            else:
                joined.append([])
        yield joined


class _Coverage:
    """The keys of a reference table that one table lacks, and its lines with keys beyond them."""

    def __init__(self, file: str, reference: str, noun: str, unknown_what: str):
        self.file, self.reference, self.noun = file, reference, noun
        self.unknown = _Capped(unknown_what)
        self.missing: list[str] = []  # the first MAX_EXAMPLES, in key order
        self.missing_count = 0

    def see(self, key: str, expected: list[Row], rows: list[Row]) -> None:
        if not expected:
            for row in rows:
                self.unknown.add(Problem(self.file, row.line, f"{self.noun} {key!r} is not in {self.reference}"))
        elif not rows:
            self.missing_count += 1
            self.missing += [key] if self.missing_count <= MAX_EXAMPLES else []

    def problems(self) -> list[Problem]:
        shown = ", ".join(self.missing) + (" ..." if self.missing_count > MAX_EXAMPLES else "")
        message = f"{self.missing_count} {self.noun}s of {self.reference} have no line here: {shown}"
        return self.unknown.problems() + ([Problem(self.file, None, message)] if self.missing_count else [])


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
        return RecordingProbe(
            None, f"{path}: channel {source.channel + 1} requested but the file has {info.channels}", path
        )
    return RecordingProbe(info.frames / info.samplerate, None, path)


def _probe_sphere(path: str, channel: int) -> RecordingProbe:
    header = read_sphere_header(path)
    if channel >= header.channel_count:
        return RecordingProbe(
            None, f"{path}: channel {channel + 1} requested but the file has {header.channel_count}", path
        )
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
    """Each table is read line by line; tables with the same keys are compared as merge-joins of sorted
    streams. Only what is per recording or per speaker is held in memory: there are far fewer of those
    than utterances."""

    def __init__(self, path: Path, check_audio: bool, full_reads: int, run_commands: bool = False):
        self.dir = path
        self.check_audio = check_audio
        self.full_reads = full_reads
        self.run_commands = run_commands
        self.problems: list[Problem] = []
        self.notes: list[Problem] = []  # what was not checked, and why
        self.tables: dict[str, bool] = {}  # the tables present, and whether each is sorted

    def file(self, name: str) -> str:
        return str(self.dir / name)

    def add(self, capped: _Capped) -> None:
        self.problems.extend(capped.problems())

    def rows(self, name: str) -> Iterator[Row]:
        """The rows of table `name` in file order, streamed (format problems were reported by scan)."""
        return iter_table(self.dir / name, on_bad_line=lambda line, message: None)  # scan reported them

    def ordered(self, name: str) -> Rows:
        """The rows of table `name` in key order, for merge-joins: streamed from a sorted file. An
        unsorted one is sorted in memory, as only an invalid data dir has one (scan reported it)."""
        return self.rows(name) if self.tables[name] else sorted(self.rows(name), key=attrgetter("key"))

    def flag(self, name: str, message_of: LineCheck, what: str, rows: Rows | None = None) -> None:
        """A problem for each line of table `name` (or of `rows` from it) that `message_of` has
        something to say about."""
        if name in self.tables:
            capped = _Capped(what)
            for row in self.rows(name) if rows is None else rows:
                if message := message_of(row):
                    capped.add(Problem(self.file(name), row.line, message))
            self.add(capped)

    def run(self) -> list[Problem]:
        if not self.dir.is_dir():
            return [Problem(str(self.dir), None, "data directory not found; run python -m asr.data.prepare first")]
        self.check_required_files()
        for name in (n for n in ALL_TABLES if (self.dir / n).is_file()):
            self.scan(name)
        if "utt2spk" in self.tables:
            self.check_speakers()
            self.check_utterance_sets()
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

    def scan(self, name: str) -> None:
        """One pass over a table: its format, key order and duplicates, and the checks of each line
        on its own (LINE_CHECKS; those only when there is a utt2spk, as the other checks)."""
        path = self.dir / name
        formats, order = _Capped(f"format problems in {name}"), _KeyOrder(path, name)
        line_checks = LINE_CHECKS.get(name, ()) if (self.dir / "utt2spk").is_file() else ()
        flagged = [(check, _Capped(what)) for check, what in line_checks]
        for row in iter_table(path, on_bad_line=lambda line, message: formats.add(Problem(str(path), line, message))):
            order.see(row)
            for check, capped in flagged:
                if message := check(row):
                    capped.add(Problem(str(path), row.line, message))
        self.tables[name] = order.unsorted is None
        if order.unsorted is not None:  # then repeated keys need not be adjacent: look again, sorted in memory
            unsorted, order = order.unsorted, _KeyOrder(path, name)
            for row in self.ordered(name):
                order.see(row)
            order.problems.add(unsorted)
        self.add(formats)
        self.add(order.problems)
        for _, capped in flagged:
            self.add(capped)

    def check_speakers(self) -> None:
        if "spk2utt" in self.tables:
            self._check_spk2utt()
        if "cmvn.scp" in self.tables and not self._cmvn_keys_fit():
            self.problems.append(
                Problem(
                    self.file("cmvn.scp"),
                    None,
                    "keys are neither the speakers, the utterances, nor 'global'; recompute CMVN",
                )
            )

    def _check_spk2utt(self) -> None:
        """spk2utt must be utt2spk inverted: every utterance once, under its own speaker."""
        path = self.file("spk2utt")
        try:
            wrong, missing = self._spk2utt_mismatches(path, _in_key_order(self._spk2utt_by_utterance()))
        except _OutOfOrder:  # spk2utt unsorted, utterances under the wrong speaker, or speakers 'a' and 'a-b'
            wrong, missing = self._spk2utt_mismatches(path, sorted(self._spk2utt_by_utterance(), key=attrgetter("key")))
        total = wrong.total + missing.total  # as one kind: the wrong lines first, then what is missing
        self.problems.extend(_capped(wrong.shown + missing.shown, "spk2utt mismatches", total))
        if total:
            self.problems.append(
                Problem(path, None, "spk2utt does not match utt2spk; regenerate it with python -m asr.data.fix")
            )

    def _spk2utt_by_utterance(self) -> Iterator[Row]:
        """spk2utt as one Row(line, utterance, speaker) per listed utterance. Each speaker's utterances
        are sorted (one speaker at a time); as speaker ids prefix utterance ids, sorted speakers then
        follow one another in utterance order. Where they do not (see _check_spk2utt: Kaldi's own check,
        comparing utt2spk with this expansion, rejects all those data dirs), it is sorted in memory."""
        for row in self.rows("spk2utt"):
            yield from (Row(row.line, utt, row.key) for utt in sorted(row.value.split()))

    def _spk2utt_mismatches(self, path: str, by_utterance: Rows) -> tuple[_Capped, _Capped]:
        """spk2utt's lines that are wrong, and the utterances of utt2spk that it lacks (a merge-join by utterance)."""
        wrong, missing = _Capped(), _Capped()
        for utt, listed, utt2spk_rows in _join(by_utterance, self.ordered("utt2spk")):
            speakers = [row.value.split()[0] for row in utt2spk_rows if row.value]
            speaker = speakers[-1] if speakers else None  # of a repeated line, the last (as a dict would keep)
            if not listed:
                if speaker is not None:
                    missing.add(Problem(path, None, f"utterance {utt!r} of utt2spk is missing (speaker {speaker!r})"))
                continue
            first, *again = listed
            if first.value != speaker:
                said = f"utt2spk says {speaker!r}" if speaker is not None else "it is not in utt2spk"
                wrong.add(
                    Problem(path, first.line, f"utterance {utt!r} listed under speaker {first.value!r} but {said}")
                )
            for row in again:
                wrong.add(Problem(path, row.line, f"utterance {utt!r} listed twice"))
        return wrong, missing

    def _cmvn_keys_fit(self) -> bool:
        """cmvn.scp is per speaker, per utterance, or global: its keys are exactly one of those sets."""
        speakers = sorted({row.value.split()[0] for row in self.rows("utt2spk") if row.value})  # few
        key_sets = (
            lambda: (Row(0, speaker, "") for speaker in speakers),
            lambda: (row for row in self.ordered("utt2spk") if row.value),
            lambda: [Row(0, "global", "")],
        )
        return any(
            all(cmvn and keys for _, cmvn, keys in _join(self.ordered("cmvn.scp"), key_set())) for key_set in key_sets
        )

    def check_utterance_sets(self) -> None:
        """Every utterance table covers exactly the utterances of utt2spk (Kaldi compares the lists)."""
        names = UTT_TABLES if "segments" in self.tables else UTT_TABLES + ("wav.scp",)  # else wav.scp is per utterance
        self.check_keys_match(
            "utt2spk", "utterance", {n: f"utterances of {n} not in utt2spk" for n in names if n in self.tables}
        )

    def check_keys_match(self, reference: str, noun: str, unknown_whats: dict[str, str]) -> None:
        """Each table named in `unknown_whats` has lines for exactly the keys of table `reference`: one
        merge-join of them all."""
        coverages = [_Coverage(self.file(name), reference, noun, what) for name, what in unknown_whats.items()]
        for key, expected, *rows_of in _join(self.ordered(reference), *map(self.ordered, unknown_whats)):
            for coverage, rows in zip(coverages, rows_of):
                coverage.see(key, expected, rows)
        for coverage in coverages:
            self.problems.extend(coverage.problems())

    def check_recordings(self) -> None:
        """segments name recordings of wav.scp and use all of them; reco2file_and_channel matches."""
        if "segments" in self.tables:
            recordings = {row.key for row in self.rows("wav.scp")}
            used: set[str] = set()

            def unknown_recording(row: Row) -> str | None:
                if row.value:  # collected on the way, to save a pass
                    used.add(row.value.split()[0])
                return _unknown_recording_problem(row, recordings)

            self.flag("segments", unknown_recording, "segments naming unknown recordings")
            self.flag(
                "wav.scp",
                lambda r: None if r.key in used else f"recording {r.key!r} is used by no segment",
                "unused recordings",
            )
        if "reco2file_and_channel" in self.tables:
            self.check_keys_match(
                "wav.scp", "recording", {"reco2file_and_channel": "reco2file_and_channel keys not in wav.scp"}
            )

    def check_utt2dur_against_segments(self) -> None:
        if "utt2dur" in self.tables and "segments" in self.tables:
            capped = _Capped("utt2dur values disagreeing with segments")
            for _, durations, segments in _join(self.ordered("utt2dur"), self.ordered("segments")):
                for row in durations:
                    if message := _duration_mismatch(row, segments[0] if segments else None):
                        capped.add(Problem(self.file("utt2dur"), row.line, message))
            self.add(capped)

    def check_audio_files(self) -> None:
        """Header of every recording; full decode of a sample; segments inside the real duration."""
        wav_rows: dict[str, Row] = {}  # the first line of each recording (there are few, unless each is an utterance)
        for row in self.rows("wav.scp"):
            wav_rows.setdefault(row.key, row)
        probes = {key: probe_recording(row.value, self.run_commands) for key, row in wav_rows.items()}
        self.flag("wav.scp", lambda r: probes[r.key].problem, "unreadable recordings", rows=wav_rows.values())
        not_run = [
            Problem(
                self.file("wav.scp"), row.line, f"a command, not run, so its audio is unchecked: {probes[key].not_run}"
            )
            for key, row in wav_rows.items()
            if probes[key].not_run
        ]
        self.notes.extend(_capped(not_run, "commands not run (--run-commands runs them; a data dir is trusted code)"))
        self._decode_sample(wav_rows, probes)
        durations = {key: p.duration for key, p in probes.items() if p.duration is not None}
        self.flag("segments", lambda r: _segment_end_problem(r, durations), "segments past the end of their recording")
        if "segments" not in self.tables:  # then an utterance is a whole recording
            self.flag(
                "utt2dur",
                lambda r: _recording_duration_mismatch(r, durations.get(r.key)),
                "utt2dur values disagreeing with the audio",
            )

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
        self.problems.extend(_capped(problems, "undecodable recordings"))


# --- per-line checks: a message when the line is wrong, else None ---


def _utt2spk_line_problem(row: Row) -> str | None:
    return None if len(row.value.split()) == 1 else f"expected 'utterance speaker', got {row.key} {row.value!r}"


def _segment_line_problem(row: Row) -> str | None:
    return segment_problem(row.key, row.value)


def _r2fc_line_problem(row: Row) -> str | None:
    fields = row.value.split()
    if len(fields) == 2 and fields[1] in ("A", "B"):
        return None
    return f"expected '<recording> <file> <A|B>', got {row.key} {row.value!r}"


def _positive_number(value: str) -> bool:
    return positive_duration(value) is not None


def _duration_line_problem(row: Row) -> str | None:
    return None if _positive_number(row.value) else f"duration must be a positive number, got {row.value!r}"


def _speaker_prefix_problem(row: Row) -> str | None:
    speaker = row.value.split()[0] if row.value else ""
    if not speaker or row.key.startswith(speaker):
        return None
    return (
        f"utterance {row.key!r} does not start with its speaker id {speaker!r}; Kaldi needs speaker ids "
        "as prefixes of utterance ids so that sorting by either gives the same order"
    )


def _empty_transcript_problem(row: Row) -> str | None:
    return None if row.value else f"utterance {row.key!r} has an empty transcript"


def _illegal_symbol_problem(row: Row) -> str | None:
    illegal = [s for s in ILLEGAL_TEXT_SYMBOLS if s in row.value.split()]
    return f"illegal symbol {illegal[0]!r} (reserved for the language model)" if illegal else None


def _unknown_recording_problem(row: Row, recordings: set[str]) -> str | None:
    recording = row.value.split()[0] if row.value else ""
    return None if recording in recordings else f"recording {recording!r} of {row.key} is not in wav.scp"


def _duration_mismatch(row: Row, segment: Row | None) -> str | None:
    if segment is None or not _positive_number(row.value) or _segment_line_problem(segment):
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
    if _segment_line_problem(row):
        return None
    recording, _, end = row.value.split()
    duration = durations.get(recording)
    if duration is None or float(end) <= duration + SEGMENT_END_TOLERANCE_S:
        return None
    return f"{row.key} ends at {float(end):.2f}s but recording {recording} lasts {duration:.2f}s"


# Checks of one line on its own, made while a table is first read: (check, what its problems are).
LINE_CHECKS: dict[str, tuple[tuple[LineCheck, str], ...]] = {
    "utt2spk": (
        (_utt2spk_line_problem, "malformed utt2spk lines"),
        (_speaker_prefix_problem, "utterances without their speaker prefix"),
    ),
    "segments": ((_segment_line_problem, "bad segments"),),
    "reco2file_and_channel": ((_r2fc_line_problem, "malformed reco2file_and_channel lines"),),
    "utt2dur": ((_duration_line_problem, "bad utt2dur lines"),),
    "reco2dur": ((_duration_line_problem, "bad reco2dur lines"),),
    "text": ((_empty_transcript_problem, "empty transcripts"), (_illegal_symbol_problem, "lines with illegal symbols")),
}


def validate_data_dir(
    path: str | os.PathLike,
    check_audio: bool = True,
    full_reads: int = FULL_READS,
    run_commands: bool = False,
    notes: list[Problem] | None = None,
) -> list[Problem]:
    """All problems of the data dir at `path` (an empty list when it is valid). Commands in
    wav.scp run only with run_commands; the entries not run are added to `notes`."""
    validator = _Validator(Path(path), check_audio, full_reads, run_commands)
    problems = validator.run()
    if notes is not None:
        notes.extend(validator.notes)
    return problems


def checked_from(data_dir: str | os.PathLike, args: argparse.Namespace) -> tuple[dict, list[Path]]:
    """What a data dir's validate record names: the options, and the tables there are."""
    options = {"check_audio": not args.no_audio, "full_reads": args.full_reads, "run_commands": args.run_commands}
    return options, [Path(data_dir) / name for name in ALL_TABLES if (Path(data_dir) / name).is_file()]


def checked_already(data_dir: str, args: argparse.Namespace) -> bool:
    """Whether the data dir's record says it was found valid as it is now, with these options."""
    reason = "--force" if args.force else why_rerun(data_dir, STAGE, *checked_from(data_dir, args))
    if reason is None:
        print(f"{data_dir}: valid (checked already, {record_path(data_dir, STAGE)})")
    elif Path(data_dir).is_dir():
        print(f"{data_dir}: checking ({reason})", file=sys.stderr)
    return reason is None


def record_valid(data_dir: str, args: argparse.Namespace) -> None:
    """The record of a data dir found valid; a dir this user may not write is checked every time."""
    try:
        write_record(data_dir, STAGE, RERUN, *checked_from(data_dir, args), {})
    except OSError as err:
        print(f"note: {data_dir}: no record written ({err.strerror}); it will be checked again", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.data.validate", description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dirs", nargs="+", help="Kaldi data directories to check")
    parser.add_argument("--no-audio", action="store_true", help="skip reading audio headers and files")
    parser.add_argument(
        "--full-reads", type=int, default=FULL_READS, help="audio files decoded completely (default %(default)s)"
    )
    parser.add_argument(
        "--run-commands",
        action="store_true",
        help="run wav.scp entries that are commands (`cmd |`) to check their audio; a data dir is trusted code",
    )
    parser.add_argument("--force", action="store_true", help="check even a dir whose record says it is valid as it is")
    args = parser.parse_args(argv)
    failed = 0
    for data_dir in args.data_dirs:
        if checked_already(data_dir, args):
            continue
        notes: list[Problem] = []
        problems = validate_data_dir(
            data_dir,
            check_audio=not args.no_audio,
            full_reads=args.full_reads,
            run_commands=args.run_commands,
            notes=notes,
        )
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            failed += 1
            record_path(data_dir, STAGE).unlink(missing_ok=True)
            hint = f"; python -m asr.data.fix {data_dir} repairs most of them" if Path(data_dir).is_dir() else ""
            print(f"{data_dir}: {len(problems)} problems{hint}", file=sys.stderr)
        else:
            record_valid(data_dir, args)
            unchecked = f" ({len(notes)} notes above: not everything could be checked)" if notes else ""
            print(f"{data_dir}: valid{unchecked}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
