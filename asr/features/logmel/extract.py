"""The features stage: filterbank features for the train, dev and eval data dirs.

For each set, `<feats_dir>/<name>/<set>/` holds
  feats.ark, feats.scp   one matrix per utterance (kaldiio; Kaldi reads them), compressed as
                         Kaldi's `copy-feats --compress=true` does with features.compress
  utt2num_frames         frames per utterance
  feat_dim               the feature dimension, one line (the model config reads it)
  delta_opts, delta_columns   with features.delta_order > 0: the reader appends add-deltas of
                         the stored filterbank (asr.features.featureset); they are not stored
  compress               whether the matrices are compressed (true/false)
  cmvn.ark, cmvn.scp, cmvn_type   CMVN statistics per `features.cmvn` unit (asr.features.cmvn)
  fbank.conf             the options in Kaldi's --option=value form (compute-fbank-feats --config)
  data_checksum          a checksum of the data dir files the features were made from
  skipped                `utt reason` for utterances that could not be extracted (if any): audio
                         unreadable, segment outside it, too short for a frame, or features with
                         NaN/inf values (never written: one would make every loss it enters NaN)

Work is split by recording into `features.jobs` worker processes, each writing its own
ark/scp part and utt2num_frames/skipped part tables; the parts are then joined into one ark and
the tables merged in key order (asr.features.parts). No process holds a line per utterance: the
main one holds the recordings (wav.scp, seconds of audio for balancing the jobs), and each
worker reads utt2spk and segments in step, a recording's run of utterances at a time. The set
directory is built under a temporary name and renamed when complete, so an existing set
directory is complete; a re-run skips it unless the options or the data dir changed, or
`features.force` is set.

On a cluster (Kaldi's `nj` with `slurm.pl`), `features.split.count=N features.split.index=I`
computes only share I of N (recordings balanced by duration, the same N shares on every
machine) into `<set>.shares/I-of-N/`, each share complete or absent; a run with
`features.split.count=N` and no index then merges the shares into the set, computing any share
that is missing or was made from other inputs, and removes them. A share's directory holds
feats.{ark,scp}, utt2num_frames, skipped (if any), cmvn.{ark,scp} and share.json (its inputs,
counts, seconds, and the skipped recordings for the log).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import kaldiio
import numpy as np
import torch

from asr.data.audio import cut_segment, read_recording, shell_command
from asr.data.datadir import require_data_dir
from asr.features import cmvn
from asr.features.config import FeaturesConfig
from asr.features.deltas import delta_opts
from asr.features.logmel.fbank import fbank_batch
from asr.features.logmel.options import FbankOptions
from asr.features.featureset import DELTA_COLUMNS, FeatureLayout, FeatureWriter, LoadDeltas, non_finite_problem
from asr.features.parts import COPY_CHUNK, join_parts, merge_part_tables, merge_skipped, repoint_scp
from asr.features.pool import run_parts
from asr.features.summary import SetSummary, log_summary
from asr.kaldi import commands
from asr.kaldi.segments import parse_duration, parse_segment
from asr.kaldi.table import Lookup, c_sort_key, read_table, sorted_table
from asr.utils.atomic import atomic_dir
from asr.utils.errors import InputError
from asr.utils.record import outputs_of, record_path, why_rerun, write_record

log = logging.getLogger("asr.features")

STAGE, RERUN = "features", "python -m asr.features"  # the stage record of a log-mel set (asr/utils/record.py)
# Files whose presence marked a complete set directory before stage records (_unrecorded_set_complete).
OUTPUT_FILES = ("feats.ark", "feats.scp", "utt2num_frames", "feat_dim", "cmvn_type", "fbank.conf", "data_checksum")
# The data dir files that decide which samples each utterance has.
SOURCE_FILES = ("wav.scp", "segments", "utt2spk")


@dataclass
class RecordingWork:
    """One recording to extract, without its utterances (the workers read those from the data
    dir, so no process holds a line per utterance). `problem` says why its utterances cannot
    be extracted at all; `recording` is the utterance itself for one with no line in segments."""

    recording: str
    wav: str | None
    weight: float  # seconds of audio when known, for balancing the jobs
    problem: str | None = None

    @property
    def key(self) -> str:
        """Row.work of its utterances: an utterance without a segment is a work of its own."""
        return f"{self.recording} (no segment)" if self.problem == NO_SEGMENT else self.recording


@dataclass
class PartTask:
    index: int
    works: list[RecordingWork]
    data_dir: str
    out_dir: str
    options: FbankOptions
    cmvn_unit: str
    device: str
    batch_seconds: float
    delta_order: int = 0
    delta_window: int = 2
    compress: bool = False

    @property
    def layout(self) -> FeatureLayout:
        """The stored filterbank, with the deltas the reader appends."""
        deltas = LoadDeltas(self.delta_order, self.delta_window, 0, self.options.dim) if self.delta_order > 0 else None
        return FeatureLayout(self.options.dim * (1 + self.delta_order), deltas)


@dataclass
class PartResult:
    """What a part sends back: counts and sums. Its utterances' frame counts and skip reasons
    are in its utt2num_frames.<i> and skipped.<i>, their features in feats.<i>.ark."""

    utterances: int = 0
    frames: int = 0
    stats: dict[str, np.ndarray] = field(default_factory=dict)
    # (recording, reason) -> [utterances skipped, the first SKIPPED_NAMED of them], for the log
    skipped: dict[tuple[str, str], list] = field(default_factory=dict)
    seconds: float = 0.0

    def skip(self, recording: str, reason: str, utts: list[str], count: int | None = None) -> None:
        """`count` utterances (default: those of `utts`) of `recording` skipped for `reason`."""
        note = self.skipped.setdefault((recording, reason), [0, []])
        note[0] += len(utts) if count is None else count
        note[1].extend(utts[: SKIPPED_NAMED - len(note[1])])

    def add(self, other: "PartResult") -> None:
        """Another part's counts and sums into these (statistics in part order, as cmvn.merge_stats)."""
        self.utterances += other.utterances
        self.frames += other.frames
        self.seconds += other.seconds
        cmvn.add_stats(self.stats, other.stats)
        for (recording, reason), (count, utts) in other.skipped.items():
            self.skip(recording, reason, utts, count)


# ---------------------------------------------------------------------------- stage


def extract_features(cfg: Any) -> list[SetSummary]:
    """The stage: every set of cfg.data (train, dev, eval) into cfg.features' directory."""
    feats_cfg = cfg.features
    options = FbankOptions.from_config(feats_cfg)
    out_root = Path(feats_cfg.feats_dir) / feats_cfg.name
    summaries = []
    for set_name in (cfg.data.train_set, cfg.data.dev_set, cfg.data.eval_set):
        summaries.append(
            extract_set(
                Path(cfg.data.data_dir) / set_name,
                out_root / set_name,
                options,
                cmvn_unit=feats_cfg.cmvn,
                jobs=feats_cfg.jobs,
                device=feats_cfg.device,
                batch_seconds=feats_cfg.batch_seconds,
                force=feats_cfg.force,
                deltas=(feats_cfg.delta_order, feats_cfg.delta_window),
                compress=feats_cfg.compress,
                split=(feats_cfg.split.index, feats_cfg.split.count),
            )
        )
    return summaries


def extract_set(
    data_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    options: FbankOptions,
    cmvn_unit: str = "utterance",
    jobs: int = 1,
    device: str = "cpu",
    batch_seconds: float = FeaturesConfig.batch_seconds,
    force: bool = False,
    deltas: tuple[int, int] = (0, 2),
    compress: bool = False,
    split: tuple[int, int] = (-1, 0),
) -> SetSummary:
    """Features, frame counts, feature dimension and CMVN statistics of one data dir.

    deltas: (order, window) of Kaldi's add-deltas the reader appends to the filterbank; order 0 = none.
    compress: store Kaldi's compressed matrices (1 byte per value) instead of float32.
    split: (index, count) of a share computed alone; (-1, count) merges the count shares; count 0: no shares.
    """
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    if cmvn_unit not in cmvn.UNITS:
        raise InputError(f"features.cmvn={cmvn_unit!r}: choose one of {cmvn.UNITS}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"features.device={device!r} but torch sees no GPU; use features.device=cpu")
    require_data_dir(data_dir)
    if (data_dir / "wav.scp").is_file():
        commands.check_table(data_dir / "wav.scp", shell_command)  # refused here, or logged, before any work
    recorded = _provenance(data_dir, options, cmvn_unit, deltas, compress)
    reason = "forced" if force else _why_incomplete(data_dir, out_dir, recorded)
    if reason is None:
        log.info("%s: complete already (%s), skipping; features.force=true recomputes it", data_dir.name, out_dir)
        return SetSummary(data_dir.name, 0, 0, 0.0, 0.0, 0, skipped=True)
    works = plan_recordings(data_dir)
    if not works:
        raise InputError(f"{data_dir / 'utt2spk'}: no utterances; re-run the prepare stage")
    index, count = split
    if not -1 <= index < max(count, 1) or count < 0:
        raise InputError(
            f"features.split.index={index}, features.split.count={count}: give 0 <= index < count "
            "(one array job per share), or index=-1 to merge"
        )
    extractor = _PartExtractor(data_dir, options, cmvn_unit, device, batch_seconds, deltas, compress, recorded, jobs)
    started = time.perf_counter()
    if index >= 0:
        shares = split_into_parts(works, count)
        share_dir = shares_dir(out_dir) / f"{index}-of-{count}"
        if index < len(shares):
            extractor.share(shares[index], share_dir, f"{data_dir.name} {index + 1}/{count}")
        log.info(
            "%s: share %d of %d in %s; a run with features.split.count=%d and no index merges the shares",
            data_dir.name,
            index,
            count,
            share_dir,
            count,
        )
        return SetSummary(data_dir.name, 0, 0, 0.0, time.perf_counter() - started, 0, share=f"{index}-of-{count}")
    log.info("%s: extracting into %s (%s)", data_dir.name, out_dir, reason)
    with atomic_dir(out_dir) as tmp:
        if count > 0:
            results = [
                extractor.reuse_or_compute(share, shares_dir(out_dir) / f"{i}-of-{count}", tmp, i, data_dir.name)
                for i, share in enumerate(split_into_parts(works, count))
            ]
        else:
            results = run_parts(
                extractor.tasks(split_into_parts(works, jobs), tmp),
                desc=data_dir.name,
                total=len(works),
                work=extract_part,
            )
        summary = _finish_set(data_dir, results, tmp, out_dir, options.dim * (1 + deltas[0]), cmvn_unit, recorded)
    shutil.rmtree(shares_dir(out_dir), ignore_errors=True)
    summary.wall_seconds = time.perf_counter() - started
    log_summary(summary)
    return summary


def shares_dir(out_dir: Path) -> Path:
    return out_dir.with_name(out_dir.name + ".shares")


@dataclass
class _PartExtractor:
    """Computes a set's parts: all in local worker processes, or one cluster share alone."""

    data_dir: Path
    options: FbankOptions
    cmvn_unit: str
    device: str
    batch_seconds: float
    deltas: tuple[int, int]
    compress: bool
    recorded: dict[str, str]
    jobs: int

    def tasks(self, parts: list[list[RecordingWork]], into: Path) -> list[PartTask]:
        return [
            PartTask(
                i,
                part,
                str(self.data_dir),
                str(into),
                self.options,
                self.cmvn_unit,
                self.device,
                self.batch_seconds,
                *self.deltas,
                self.compress,
            )
            for i, part in enumerate(parts)
        ]

    def share(self, works: list[RecordingWork], share_dir: Path, desc: str) -> PartResult:
        """One share over `jobs` local processes into `share_dir`: feats.{ark,scp}, utt2num_frames,
        skipped (if any), CMVN statistics and share.json (what it was made from, counts, seconds)."""
        with atomic_dir(share_dir) as tmp:
            parts = split_into_parts(works, self.jobs)
            results = run_parts(self.tasks(parts, tmp), desc=desc, total=len(works), work=extract_part)
            result = _combined(results)
            join_parts(tmp, share_dir, len(parts))
            merge_part_tables(tmp, "utt2num_frames", len(parts))
            merge_skipped(tmp, len(parts))
            write_cmvn_stats(tmp, share_dir, results, self.cmvn_unit)
            (tmp / "share.json").write_text(
                json.dumps({"format": SHARE_FORMAT, "recorded": self.recorded, **_as_json(result)})
            )
        return result

    def reuse_or_compute(
        self, works: list[RecordingWork], share_dir: Path, tmp: Path, index: int, name: str
    ) -> PartResult:
        """Share `index` as part `index` of the set being built in `tmp`: read from `share_dir`
        when it was made from the same inputs (by this code's format), else computed here first."""
        record = share_dir / "share.json"
        meta = json.loads(record.read_text()) if record.is_file() else {}
        if meta.get("recorded") != self.recorded or meta.get("format") != SHARE_FORMAT:
            log.info(
                "%s: share %s is %s; computing it here",
                name,
                share_dir.name,
                "from other inputs" if meta else "missing",
            )
            self.share(works, share_dir, f"{name} share {index}")
            meta = json.loads(record.read_text())
        for file_name in ("feats", "cmvn") if self.cmvn_unit == "utterance" else ("feats",):  # joined like the features
            shutil.copyfile(share_dir / f"{file_name}.ark", tmp / f"{file_name}.{index}.ark")
            shutil.copyfile(share_dir / f"{file_name}.scp", tmp / f"{file_name}.{index}.scp")
        shutil.copyfile(share_dir / "utt2num_frames", tmp / f"utt2num_frames.{index}")
        skipped = share_dir / "skipped"
        if skipped.is_file():
            shutil.copyfile(skipped, tmp / f"skipped.{index}")
        else:
            (tmp / f"skipped.{index}").touch()
        result = _from_json(meta)
        if self.cmvn_unit not in ("utterance", "none"):
            result.stats = cmvn.read_stats(share_dir / "cmvn.scp")
        return result


# share.json's layout: 2 = counts, and skipped recordings as (recording, reason, count, first utterances)
SHARE_FORMAT = 2


def _as_json(result: PartResult) -> dict[str, Any]:
    return {
        "utterances": result.utterances,
        "frames": result.frames,
        "seconds": result.seconds,
        "skipped": [[recording, reason, count, utts] for (recording, reason), (count, utts) in result.skipped.items()],
    }


def _from_json(meta: dict[str, Any]) -> PartResult:
    skipped = {(recording, reason): [count, utts] for recording, reason, count, utts in meta["skipped"]}
    return PartResult(meta["utterances"], meta["frames"], {}, skipped, meta["seconds"])


def _combined(results: list[PartResult]) -> PartResult:
    total = PartResult()
    for result in results:
        total.add(result)
    return total


def _finish_set(
    data_dir: Path,
    results: list[PartResult],
    tmp: Path,
    out_dir: Path,
    feat_dim: int,
    cmvn_unit: str,
    recorded: dict[str, str],
) -> SetSummary:
    """Join the parts and write everything beside the features; raise if nothing worked."""
    name = data_dir.name
    total = _combined(results)
    for (recording, reason), (count, utts) in total.skipped.items():
        log.warning("%s: recording %s: %s; skipped %d utterance(s): %s", name, recording, reason, count, " ".join(utts))
    if not total.utterances:
        first = next(iter(total.skipped), None)
        raise InputError(
            f"{data_dir}: no utterance could be extracted"
            f"{f' (first: {first[0]}: {first[1]})' if first else ''}; check wav.scp and the audio files"
        )
    join_parts(tmp, out_dir, len(results))
    merge_part_tables(tmp, "utt2num_frames", len(results))
    (tmp / "feat_dim").write_text(f"{feat_dim}\n")
    write_cmvn_stats(tmp, out_dir, results, cmvn_unit)
    skipped = merge_skipped(tmp, len(results))
    if skipped:
        log.warning("%s: %d utterances skipped, each listed with its reason in %s", name, skipped, out_dir / "skipped")
    for file_name, content in recorded.items():
        if content:  # an empty record means "must not exist" (see _provenance)
            (tmp / file_name).write_text(content)
    write_record(tmp, STAGE, RERUN, recorded, source_files(data_dir), outputs_of(tmp))
    return SetSummary(name, total.utterances, total.frames, total.seconds, 0.0, skipped)


# ----------------------------------------------------------------- resumability


def _provenance(
    data_dir: Path, options: FbankOptions, cmvn_unit: str, deltas: tuple[int, int] = (0, 2), compress: bool = False
) -> dict[str, str]:
    """What the set's output depends on, as the files recording it there. An empty value
    records a file that must be absent (so sets made before a record existed stay complete)."""
    digest = hashlib.sha1()
    for file_name in SOURCE_FILES:
        path = data_dir / file_name
        digest.update(file_name.encode() + b"\0")
        if path.is_file():
            with open(path, "rb") as f:  # in chunks: the tables have a line per utterance
                for chunk in iter(lambda: f.read(COPY_CHUNK), b""):
                    digest.update(chunk)
        digest.update(b"\0")
    return {
        "fbank.conf": options.to_kaldi_conf(),
        "cmvn_type": cmvn_unit + "\n",
        "data_checksum": digest.hexdigest() + "\n",
        "delta_opts": delta_opts(*deltas) if deltas[0] > 0 else "",
        DELTA_COLUMNS: f"0 {options.dim}\n" if deltas[0] > 0 else "",
        "compress": f"{str(compress).lower()}\n",
    }


def source_files(data_dir: Path) -> list[Path]:
    """The data dir's files a set is made from: its record names them as inputs."""
    return [data_dir / name for name in SOURCE_FILES if (data_dir / name).is_file()]


def _why_incomplete(data_dir: Path, out_dir: Path, recorded: dict[str, str]) -> str | None:
    """None when the set's stage record says it is complete and made from `recorded` (the
    options and the data dir's checksum) and the data dir's files, else the reason. A set
    extracted before stage records existed is taken as complete when its own files say so, and
    one recorded before records named the data dir's files when its checksum matches; both are
    recorded now."""
    if not out_dir.is_dir():
        return "not extracted yet"
    inputs = source_files(data_dir)
    if not record_path(out_dir, STAGE).is_file() and _unrecorded_set_complete(out_dir, recorded):
        write_record(out_dir, STAGE, RERUN, recorded, inputs, outputs_of(out_dir))
        return None
    reason = why_rerun(out_dir, STAGE, recorded, inputs)
    if reason is not None and inputs and why_rerun(out_dir, STAGE, recorded, []) is None:
        write_record(out_dir, STAGE, RERUN, recorded, inputs, outputs_of(out_dir))
        return None
    return reason


def _unrecorded_set_complete(out_dir: Path, recorded: dict[str, str]) -> bool:
    """The rule before stage records: every output there, every recorded file as expected."""
    missing = [f for f in OUTPUT_FILES if not (out_dir / f).is_file()]
    return not missing and all(_recorded_text(out_dir / f) == content for f, content in recorded.items())


def _recorded_text(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


# ---------------------------------------------------------------------- planning


NO_SEGMENT = "no line in segments"
SKIPPED_NAMED = 10  # utterances the log names per skipped recording and reason


@dataclass(frozen=True)
class Row:
    """One utterance of utt2spk with where it lies: its segment, or the whole recording `utt`
    (recording None: utt2spk names it but segments does not)."""

    utt: str
    speaker: str
    recording: str | None
    start: float | None = None
    end: float | None = None

    @property
    def work(self) -> str:
        """The key of its RecordingWork."""
        return self.recording if self.recording is not None else f"{self.utt} (no segment)"


def utterance_rows(data_dir: Path) -> Iterator[Row]:
    """The utterances of utt2spk in key order, joined with segments read in step."""
    path = data_dir / "segments"
    # an empty segments file counts as none: whole recordings (as read_data_dir's empty table)
    segments = Lookup(path) if path.is_file() and path.stat().st_size else None
    for lineno, utt, speaker in sorted_table(data_dir / "utt2spk"):
        if not speaker:
            raise InputError(f"{data_dir / 'utt2spk'}:{lineno}: key {utt!r} has no value")
        if segments is None:
            yield Row(utt, speaker, utt)
            continue
        value = segments.get(utt)
        if value is None:
            yield Row(utt, speaker, None)
            continue
        segment = parse_segment(segments.path, segments.lineno, utt, value)
        yield Row(utt, speaker, segment.recording, segment.start, segment.end)


def plan_recordings(data_dir: Path) -> list[RecordingWork]:
    """The data dir's recordings with their seconds of audio, read a line at a time: only
    what is per recording is held (wav.scp), never a line per utterance."""
    wav_scp = read_table(data_dir / "wav.scp") if (data_dir / "wav.scp").is_file() else {}
    durations = _durations(data_dir / "utt2dur")
    works: dict[str, RecordingWork] = {}
    for row in utterance_rows(data_dir):
        if row.recording is None:  # one work each: the log names them one by one
            works[row.work] = RecordingWork(row.utt, None, 0.0, NO_SEGMENT)
            continue
        work = works.get(row.recording)
        if work is None:
            wav = wav_scp.get(row.recording)
            work = works[row.recording] = RecordingWork(
                row.recording, wav, 0.0, None if wav is not None else "not in wav.scp"
            )
        if row.start is not None and row.end is not None:
            work.weight += row.end - row.start
        else:
            work.weight = durations(row.utt)
    return list(works.values())


def _durations(path: Path) -> Callable[[str], float]:
    """Seconds of each utterance from utt2dur (1.0 when absent), asked in key order."""
    durations = Lookup(path)

    def seconds(utt: str) -> float:
        value = durations.get(utt)
        return 1.0 if value is None else parse_duration(path, durations.lineno, utt, value)

    return seconds


def split_into_parts(works: list[RecordingWork], jobs: int) -> list[list[RecordingWork]]:
    """At most `jobs` parts of about equal audio: longest recording first to the lightest part."""
    jobs = max(1, min(jobs, len(works)))
    parts: list[list[RecordingWork]] = [[] for _ in range(jobs)]
    loads = [0.0] * jobs
    for work in sorted(works, key=lambda w: -w.weight):
        lightest = loads.index(min(loads))
        parts[lightest].append(work)
        loads[lightest] += work.weight
    return [p for p in parts if p]


# ---------------------------------------------------------------------- workers


def extract_part(task: PartTask, on_recording_done: Callable[[], None]) -> PartResult:
    """Features of one part's recordings into feats.<index>.ark/scp in task.out_dir, their frame
    counts and skip reasons into utt2num_frames.<index> and skipped.<index> (in key order)."""
    out = Path(task.out_dir)
    # Per-utterance statistics go to the part's own cmvn.<index>.ark (joined like the features),
    # so no process holds one per utterance; per speaker or global they are summed in memory.
    per_utterance = f"ark,scp:{out / f'cmvn.{task.index}.ark'},{out / f'cmvn.{task.index}.scp'}"
    with (
        PartFiles(out, task.index, task.compress) as files,
        (
            kaldiio.WriteHelper(per_utterance) if task.cmvn_unit == "utterance" else contextlib.nullcontext()
        ) as stats_writer,
    ):
        writer = UtteranceWriter(task, files, stats_writer)
        for work, rows in recording_runs(task):
            for row, feats, seconds in _recording_features(work, rows, task, writer):
                writer(work.recording, row, feats, seconds)
            writer.flush_skipped()
            on_recording_done()
    return writer.result


def recording_runs(task: PartTask) -> Iterator[tuple[RecordingWork, list[Row]]]:
    """(recording, its rows) for each run of consecutive utterances of one of the part's
    recordings in key order. A recording whose utterances are not together in sorted order (a
    Hub5 recording holds two speakers' sides) comes in more than one run."""
    mine = {work.key: work for work in task.works}
    current, rows = None, []
    for row in utterance_rows(Path(task.data_dir)):
        work = mine.get(row.work)
        if work is None:
            continue
        if work is not current and rows:
            yield current, rows
            rows = []
        current = work
        rows.append(row)
    if rows:
        yield current, rows


class PartFiles(contextlib.ExitStack):
    """A part's features (feats.<i>.{ark,scp}) and tables utt2num_frames.<i>, skipped.<i>."""

    def __init__(self, out: Path, index: int, compress: bool):
        super().__init__()
        self.feats = self.enter_context(FeatureWriter(out / f"feats.{index}.ark", out / f"feats.{index}.scp", compress))
        self.num_frames = self.enter_context(open(out / f"utt2num_frames.{index}", "w", encoding="utf-8"))
        self.skipped = self.enter_context(open(out / f"skipped.{index}", "w", encoding="utf-8"))


class UtteranceWriter:
    """Writes a part's utterances and sums what the part sends back."""

    def __init__(self, task: PartTask, files: PartFiles, stats_writer: Any):
        self.task, self.files, self.stats_writer = task, files, stats_writer
        self.layout, self.result = task.layout, PartResult()
        self.run_skipped: list[tuple[str, str]] = []  # (utt, reason) of the current run, written sorted

    def __call__(self, recording: str, row: Row, feats: np.ndarray, seconds: float) -> None:
        problem = non_finite_problem(feats)
        if problem:
            self.skip(recording, problem, [row.utt])
            return
        stored = self.files.feats(row.utt, feats)
        self.files.num_frames.write(f"{row.utt} {feats.shape[0]}\n")
        self.result.utterances += 1
        self.result.frames += feats.shape[0]
        self.result.seconds += seconds
        if self.task.cmvn_unit == "none":
            return
        stats = cmvn.accumulate([self.layout.expand(stored)])  # of what the reader normalises: deltas included
        if self.task.cmvn_unit == "utterance":
            self.stats_writer(row.utt, stats)
        else:
            cmvn.add_stats(self.result.stats, {cmvn.cmvn_key(self.task.cmvn_unit, row.utt, row.speaker): stats})

    def skip(self, recording: str, reason: str, utts: list[str]) -> None:
        self.result.skip(recording, reason, utts)
        self.run_skipped.extend((utt, reason) for utt in utts)

    def flush_skipped(self) -> None:
        """The run's skipped utterances in key order (a run's keys all precede the next run's)."""
        for utt, reason in sorted(self.run_skipped, key=lambda row: c_sort_key(row[0])):
            self.files.skipped.write(f"{utt} {reason}\n")
        self.run_skipped = []


def _recording_features(work: RecordingWork, rows: list[Row], task: PartTask, writer: UtteranceWriter):
    """(row, features, seconds) for a run of one recording's utterances; failures go to writer.skip."""
    if work.problem is not None or work.wav is None:
        writer.skip(work.recording, work.problem or "not in wav.scp", [row.utt for row in rows])
        return []
    try:
        samples, rate = read_recording(work.wav)
    except (InputError, OSError, ValueError, RuntimeError) as err:
        writer.skip(work.recording, str(err), [row.utt for row in rows])  # the error names the file
        return []
    if rate != task.options.sample_frequency:
        reason = f"sampled at {rate} Hz but features.sample_frequency={task.options.sample_frequency:g}"
        writer.skip(work.recording, reason, [row.utt for row in rows])
        return []
    cut, waves = _cut_utterances(work, rows, samples, rate, writer)
    feats = compute_features(waves, task.options, task.device, int(task.batch_seconds * rate))
    out = []
    for row, wave, mat in zip(cut, waves, feats):
        if mat.shape[0] == 0:
            writer.skip(work.recording, f"{len(wave)} samples is shorter than one frame", [row.utt])
        else:
            out.append((row, mat, len(wave) / rate))
    return out


def _cut_utterances(
    work: RecordingWork, rows: list[Row], samples: np.ndarray, rate: int, writer: UtteranceWriter
) -> tuple[list[Row], list[np.ndarray]]:
    cut, waves = [], []
    for row in rows:
        if row.start is None or row.end is None:
            cut.append(row)
            waves.append(samples)
            continue
        try:
            waves.append(cut_segment(samples, rate, row.start, row.end, row.utt))
            cut.append(row)
        except InputError as err:
            writer.skip(work.recording, str(err), [row.utt])
    return cut, waves


def compute_features(
    waves: list[np.ndarray],
    options: FbankOptions,
    device: str = "cpu",
    max_batch_samples: int = 80_000,
    compute_dtype: torch.dtype = torch.float64,
) -> list[np.ndarray]:
    """Filterbank features of each waveform, in order; batched by similar length to limit padding.
    A batch of 80,000 samples (10 s at 8 kHz) keeps its float64 frames (2 MB) in cache: on one
    core, Hub5 conversations took 4.4 times less CPU than in batches of 2.4 million samples
    (which also held 250 MB more), and 1.3 to 1.9 times less than in batches of 400,000."""
    order = sorted(range(len(waves)), key=lambda i: -len(waves[i]))
    feats: list[np.ndarray | None] = [None] * len(waves)
    for batch in _length_batches(order, waves, max_batch_samples):
        longest = max(len(waves[batch[0]]), 1)
        padded = np.zeros((len(batch), longest), dtype=np.float32)
        for row, i in enumerate(batch):
            padded[row, : len(waves[i])] = waves[i]
        lengths = torch.tensor([len(waves[i]) for i in batch])
        out, counts = fbank_batch(torch.from_numpy(padded).to(device), lengths, options, compute_dtype=compute_dtype)
        out = out.cpu().numpy()
        for row, i in enumerate(batch):
            feats[i] = np.ascontiguousarray(out[row, : int(counts[row])])
    return feats  # type: ignore[return-value]


def _length_batches(order: list[int], waves: list[np.ndarray], max_batch_samples: int) -> list[list[int]]:
    """Consecutive runs of `order` (longest first) whose padded size stays under the limit."""
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * len(waves[batches[-1][0]]) <= max_batch_samples:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


# ----------------------------------------------------------------------- joining


def write_cmvn_stats(tmp: Path, out_dir: Path, results: list[PartResult], unit: str) -> None:
    """cmvn.{ark,scp} and cmvn_type into `tmp`, the scp naming `out_dir`: per utterance the parts'
    cmvn.<i>.ark joined, else the parts' sums."""
    if unit == "utterance":
        join_parts(tmp, out_dir, len(results), "cmvn")
        (tmp / "cmvn_type").write_text(f"{unit}\n")
        return
    cmvn.write_stats(cmvn.merge_stats(r.stats for r in results), tmp, unit)
    repoint_scp(tmp / "cmvn.scp", out_dir.absolute() / "cmvn.ark")  # it names the temporary dir
