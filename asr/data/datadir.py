"""Kaldi data directories: the plain-text contract every stage and every Kaldi tool reads.

Files are `key value...` lines sorted by key in C locale (byte order), one key per line.
`read_data_dir` loads the files that exist; `write_data_dir` writes them sorted, into a
temporary directory renamed into place when complete. A corpus too large to hold (millions of
utterances) is a `StreamedDataDir`: its recordings in memory, its utterances one at a time in
sorted order, written line by line by `write_streamed`.
"""

from __future__ import annotations

import heapq
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Collection, Iterable, Iterator

from asr.kaldi.segments import Segment, read_durations, read_segments
from asr.kaldi.table import c_sort_key, read_table, write_table
from asr.utils.atomic import atomic_dir
from asr.utils.errors import InputError
from asr.utils.textfile import read_text

# Files holding one "key value" line per key, in the order they are written.
TABLE_FILES = ("wav.scp", "segments", "text", "utt2spk", "reco2file_and_channel", "utt2dur", "feats.scp", "cmvn.scp")
# Files copied as they are (scoring references).
VERBATIM_FILES = ("stm", "glm")


@dataclass(frozen=True)
class Utterance:
    """One utterance of a data dir with segments: its utt2spk, segments and text lines."""

    utt: str
    speaker: str
    segment: Segment
    text: str


@dataclass
class DataDir:
    """In-memory Kaldi data dir. Optional tables are empty dicts when absent."""

    wav_scp: dict[str, str] = field(default_factory=dict)
    text: dict[str, str] = field(default_factory=dict)
    utt2spk: dict[str, str] = field(default_factory=dict)
    segments: dict[str, Segment] = field(default_factory=dict)
    reco2file_and_channel: dict[str, tuple[str, str]] = field(default_factory=dict)
    utt2dur: dict[str, float] = field(default_factory=dict)
    feats_scp: dict[str, str] = field(default_factory=dict)
    cmvn_scp: dict[str, str] = field(default_factory=dict)
    verbatim: dict[str, str] = field(default_factory=dict)  # stm/glm contents

    @property
    def utts(self) -> list[str]:
        return sorted(self.utt2spk, key=c_sort_key)

    @property
    def spk2utt(self) -> dict[str, list[str]]:
        return spk2utt(self.utt2spk)

    def recording_of(self, utt: str) -> str:
        """With segments the recording is named there; without, utterance == recording."""
        return self.segments[utt].recording if self.segments else utt

    def subset(self, utts: Iterable[str]) -> "DataDir":
        """The data dir restricted to `utts` (and the recordings/speakers they use)."""
        keep = set(utts)
        segments = {u: s for u, s in self.segments.items() if u in keep}
        recos = {s.recording for s in segments.values()} if self.segments else keep
        return DataDir(
            wav_scp={r: v for r, v in self.wav_scp.items() if r in recos},
            text={u: t for u, t in self.text.items() if u in keep},
            utt2spk={u: s for u, s in self.utt2spk.items() if u in keep},
            segments=segments,
            reco2file_and_channel={r: v for r, v in self.reco2file_and_channel.items() if r in recos},
            utt2dur={u: d for u, d in self.utt2dur.items() if u in keep},
            feats_scp={u: v for u, v in self.feats_scp.items() if u in keep},
            cmvn_scp=dict(self.cmvn_scp),
            verbatim=dict(self.verbatim),
        )


def utterances_of(d: DataDir) -> Iterator[Utterance]:
    """The utterances of a data dir with segments, in sorted order."""
    for utt in d.utts:
        yield Utterance(utt, d.utt2spk[utt], d.segments[utt], d.text[utt])


@dataclass(frozen=True)
class StreamedDataDir:
    """A data dir with segments whose utterances are read one at a time: `recordings` holds
    what is per recording (wav.scp, reco2file_and_channel) and the verbatim files,
    `utterances()` yields the utterances in sorted order, afresh at each call."""

    recordings: DataDir
    utterances: Callable[[], Iterator[Utterance]]

    def __iter__(self) -> Iterator[Utterance]:
        return self.utterances()

    def collect(self) -> DataDir:
        """The data dir in memory (with the recordings its utterances use)."""
        d = DataDir(verbatim=dict(self.recordings.verbatim))
        for u in self:
            d.text[u.utt], d.utt2spk[u.utt], d.segments[u.utt] = u.text, u.speaker, u.segment
        used = {s.recording for s in d.segments.values()}
        d.wav_scp = {r: v for r, v in self.recordings.wav_scp.items() if r in used}
        d.reco2file_and_channel = {r: v for r, v in self.recordings.reco2file_and_channel.items() if r in used}
        return d


def streamed(d: DataDir) -> StreamedDataDir:
    return StreamedDataDir(d, lambda: utterances_of(d))


def combine_streamed(*parts: StreamedDataDir) -> StreamedDataDir:
    """`combine_data_dirs` of streamed data dirs: their utterances merged in sorted order."""
    recordings = combine_data_dirs(*(part.recordings for part in parts))
    return StreamedDataDir(recordings, lambda: heapq.merge(*parts, key=lambda u: c_sort_key(u.utt)))


def combine_data_dirs(*parts: DataDir) -> DataDir:
    """One data dir holding all of `parts` (Kaldi's utils/combine_data.sh); ids must not collide."""
    out = DataDir()
    for part in parts:
        clash = set(part.utt2spk) & set(out.utt2spk) or set(part.wav_scp) & set(out.wav_scp)
        if clash:
            raise InputError(f"cannot combine data dirs: ids {sorted(clash, key=c_sort_key)[:5]} occur in two of them")
        for name in ("wav_scp", "text", "utt2spk", "segments", "reco2file_and_channel", "utt2dur", "feats_scp"):
            getattr(out, name).update(getattr(part, name))
    return out


def spk2utt(utt2spk: dict[str, str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for utt in sorted(utt2spk, key=c_sort_key):
        out.setdefault(utt2spk[utt], []).append(utt)
    return out


def require_data_dir(path: Path) -> None:
    """InputError unless `path` is a data dir with its one required table, utt2spk."""
    if not path.is_dir():
        raise InputError(f"{path}: data directory not found; run the prepare stage first")
    if not (path / "utt2spk").is_file():
        raise InputError(f"{path / 'utt2spk'}: missing; a Kaldi data dir needs utt2spk (and wav.scp or feats.scp)")


def read_data_dir(path: str | os.PathLike, tables: Collection[str] | None = None) -> DataDir:
    """Load a Kaldi data dir. Required: utt2spk. `tables`: the other files to read (default all),
    so a stage that needs a few does not hold the others (text is the largest) per utterance."""
    path = Path(path)

    def wanted(name: str) -> bool:
        return (path / name).is_file() and (tables is None or name in tables)

    require_data_dir(path)
    d = DataDir()
    d.utt2spk = read_table(path / "utt2spk")
    if wanted("text"):
        d.text = read_table(path / "text", allow_empty_value=True)
    if wanted("wav.scp"):
        d.wav_scp = read_table(path / "wav.scp")
    if wanted("segments"):
        d.segments = read_segments(path / "segments")
    if wanted("reco2file_and_channel"):
        d.reco2file_and_channel = {
            k: tuple(v.split()[:2])
            for k, v in read_table(path / "reco2file_and_channel").items()  # type: ignore[misc]
        }
    if wanted("utt2dur"):
        d.utt2dur = read_durations(path / "utt2dur")
    if wanted("feats.scp"):
        d.feats_scp = read_table(path / "feats.scp")
    if wanted("cmvn.scp"):
        d.cmvn_scp = read_table(path / "cmvn.scp")
    for name in VERBATIM_FILES:
        if wanted(name):
            d.verbatim[name] = read_text(path / name)
    return d


def write_data_dir(d: DataDir, path: str | os.PathLike) -> Path:
    """Write all non-empty tables sorted (C locale) plus spk2utt, atomically."""
    path = Path(path)
    with atomic_dir(path) as tmp:
        write_table(tmp / "wav.scp", d.wav_scp)
        write_table(tmp / "text", d.text)
        write_table(tmp / "utt2spk", d.utt2spk)
        write_table(tmp / "spk2utt", {s: " ".join(u) for s, u in d.spk2utt.items()})
        if d.segments:
            write_table(tmp / "segments", {u: str(s) for u, s in d.segments.items()})
        if d.reco2file_and_channel:
            write_table(tmp / "reco2file_and_channel", {r: " ".join(v) for r, v in d.reco2file_and_channel.items()})
        if d.utt2dur:
            write_table(tmp / "utt2dur", {u: f"{v:.3f}" for u, v in d.utt2dur.items()})
        if d.feats_scp:
            write_table(tmp / "feats.scp", d.feats_scp)
        if d.cmvn_scp:
            write_table(tmp / "cmvn.scp", d.cmvn_scp)
        for name, content in d.verbatim.items():
            (tmp / name).write_text(content, encoding="utf-8")
    return path


@dataclass
class Tally:
    """How much a data dir holds, for the log."""

    utterances: int = 0
    speakers: set[str] = field(default_factory=set)
    seconds: float = 0.0

    def add(self, u: Utterance) -> None:
        self.utterances += 1
        self.speakers.add(u.speaker)
        self.seconds += u.segment.duration

    def __str__(self) -> str:
        return f"{self.utterances} utterances, {len(self.speakers)} speakers, {self.seconds / 3600:.3f} hours"


def tally(utterances: Iterable[Utterance]) -> Tally:
    out = Tally()
    for u in utterances:
        out.add(u)
    return out


class _TableLines:
    """The per-utterance tables of a data dir with segments, written a line at a time; the
    utterances must come sorted, each speaker's together (true of speaker-prefixed ids)."""

    FILES = ("text", "utt2spk", "segments", "utt2dur", "spk2utt")

    def __init__(self, path: Path):
        self.path, self.files = path, {name: open(path / name, "w", encoding="utf-8") for name in self.FILES}
        self.last, self.speaker, self.speaker_utts = b"", "", []
        self.recordings: set[str] = set()
        self.tally = Tally()

    def add(self, u: Utterance) -> None:
        key = c_sort_key(u.utt)
        if key <= self.last:
            raise InputError(
                f"{self.path}: utterance {u.utt} comes after {self.last.decode()}; "
                "the utterances must come in sorted order, each once"
            )
        if u.speaker != self.speaker:
            self._end_speaker(u.speaker)
        self.last = key
        self.speaker_utts.append(u.utt)
        self.recordings.add(u.segment.recording)
        self.tally.add(u)
        values = {"text": u.text, "utt2spk": u.speaker, "segments": u.segment, "utt2dur": f"{u.segment.duration:.3f}"}
        for name, value in values.items():
            self.files[name].write(f"{u.utt} {value}\n")

    def _end_speaker(self, next_speaker: str) -> None:
        if self.speaker_utts:
            self.files["spk2utt"].write(f"{self.speaker} {' '.join(self.speaker_utts)}\n")
        if next_speaker and c_sort_key(next_speaker) < c_sort_key(self.speaker):
            raise InputError(
                f"{self.path}: speaker {next_speaker} comes after {self.speaker}; the speakers must come "
                "in sorted order, the utterances of each together"
            )
        self.speaker, self.speaker_utts = next_speaker, []

    def close(self) -> None:
        self._end_speaker("")
        for f in self.files.values():
            f.close()
        if not self.tally.utterances:  # as write_data_dir, which leaves out empty optional tables
            (self.path / "segments").unlink()
            (self.path / "utt2dur").unlink()


def write_streamed(d: StreamedDataDir, path: Path) -> Tally:
    """Write `d` into the existing directory `path` (write_data_dir's files, byte for byte)
    holding one utterance at a time; returns what it holds."""
    lines = _TableLines(path)
    try:
        for u in d:
            lines.add(u)
    finally:
        lines.close()

    def used(table: dict) -> dict:
        return {r: v for r, v in table.items() if r in lines.recordings}

    write_table(path / "wav.scp", used(d.recordings.wav_scp))
    reco2file_and_channel = used(d.recordings.reco2file_and_channel)
    if reco2file_and_channel:
        write_table(path / "reco2file_and_channel", {r: " ".join(v) for r, v in reco2file_and_channel.items()})
    for name, content in d.recordings.verbatim.items():
        (path / name).write_text(content, encoding="utf-8")
    return lines.tally


def swbd_utt_id(speaker: str, start: float, end: float) -> str:
    """Kaldi's Switchboard utterance id: sw02001-A_000098-001156 (times in centiseconds).

    Rounded half up, `int(100 * t + 0.5)`, as swbd1_data_prep.sh does (Python's round() would
    round 0.125 s down to 12 and give a different id than Kaldi's).
    """
    return f"{speaker}_{int(start * 100 + 0.5):06d}-{int(end * 100 + 0.5):06d}"


def data_set_dir(cfg, set_name: str) -> Path:
    """`<data.data_dir>/<set>`: the Kaldi data dir of a set."""
    return Path(cfg.data.data_dir) / set_name
