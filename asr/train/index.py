"""A training set as compact arrays: built once per (data, features, tokenizer), memory-mapped.

What a learner needs to know of every training utterance (its id, length, token ids, where its
features and CMVN statistics lie) is held in a handful of numpy arrays instead of Python
objects per utterance, so a learner's memory and start-up do not grow with the corpus beyond a
few bytes per utterance: SWB-2000's ~2.2 million utterances take about 300 MB of arrays that
every learner of a machine maps from the page cache, and starting a learner is opening them.

    <feats_dir>/<features>/<set>/index.<fingerprint>/   *.npy arrays and meta.json

The fingerprint covers the files it is made from (their sizes and modification times) and the
tokenizer model, so a changed input makes a new index; the first learner that needs one builds
it (learner 0 while the others wait), reading the data dir's `text` and `utt2spk` and the
features' `feats.scp`, `utt2num_frames` and `cmvn.scp` in one pass. Kaldi keeps these files
sorted by key (C locale), which is what lets the pass stream them instead of loading them.

Arrays (N utterances kept, T tokens, K CMVN entries):
    utt_bytes, utt_offsets     the ids, UTF-8, laid end to end (offsets N + 1)
    frames                     feature frames per utterance
    tokens, token_offsets      token ids of the transcripts (offsets N + 1)
    min_frames                 output frames CTC needs: tokens plus a blank between repeats
    feat_file, feat_offset     the features: file number (meta's feat_files) and byte offset
    cmvn_of                    the CMVN entry of each utterance (its own, its speaker's, the global one)
    cmvn_file, cmvn_offset     where each CMVN entry's statistics lie
Entries that are commands (`cmd |`) or ranges rather than an ark offset keep their scp text in
meta.json (`raw_feats`, `raw_cmvn`) and are read through kaldiio as Kaldi reads them.
"""

from __future__ import annotations

import array
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import kaldiio
import numpy as np

from asr.kaldi import commands
from asr.kaldi.table import Lookup, iter_table, sorted_table
from asr.utils.atomic import atomic_dir
from asr.utils.errors import InputError, error_detail

log = logging.getLogger(__name__)

INDEX_VERSION = 1
COLUMN_TYPES = {
    "utt_bytes": np.uint8,
    "utt_offsets": np.int64,
    "frames": np.int32,
    "tokens": np.int32,
    "token_offsets": np.int64,
    "min_frames": np.int32,
    "feat_file": np.int32,
    "feat_offset": np.int64,
    "cmvn_of": np.int32,
    "cmvn_file": np.int32,
    "cmvn_offset": np.int64,
}
ARRAYS = tuple(COLUMN_TYPES)
ENCODE_CHUNK = (
    4096  # utterances per chunk: transcripts tokenized per call (sentencepiece encodes a list in C++), arrays written
)


def fingerprint(paths: list[Path], tokenizer_model: Path) -> str:
    """Sizes and modification times of the inputs and the tokenizer's bytes."""
    digest = hashlib.sha256(f"v{INDEX_VERSION}".encode())
    for path in paths:
        stat = path.stat() if path.is_file() else None
        digest.update(f"{path.name}:{stat.st_size if stat else -1}:{stat.st_mtime_ns if stat else -1};".encode())
    digest.update(tokenizer_model.read_bytes())
    return digest.hexdigest()[:16]


def ark_location(value: str) -> tuple[str, int] | None:
    """('path', byte offset) of a plain `path:offset` scp entry; None for commands and ranges."""
    if commands.is_pipe(value) or value.endswith("]"):
        return None
    path, sep, offset = value.rpartition(":")
    return (path, int(offset)) if sep and offset.isdigit() else None


def ctc_min_frames(tokens: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Output frames CTC needs for each target (tokens[offsets[i]:offsets[i + 1]]): one per
    token plus a blank between repeats."""
    offsets = np.asarray(offsets, np.int64)
    repeat = np.zeros(len(tokens) + 1, np.int64)  # repeat[k]: tokens k - 1 and k equal
    repeat[1:-1] = tokens[1:] == tokens[:-1]
    repeat[offsets[:-1]] = 0  # a target's first token repeats nothing
    before = np.cumsum(repeat)  # repeats up to each token
    starts, ends = offsets[:-1], offsets[1:]
    repeats = np.where(ends > starts, before[np.maximum(ends - 1, starts)] - before[starts], 0)
    return (ends - starts + repeats).astype(np.int32)


@dataclass
class IndexSources:
    text: Path
    utt2spk: Path
    feats_scp: Path
    utt2num_frames: Path
    cmvn_scp: Path
    cmvn_type: Path
    tokenizer_model: Path

    @classmethod
    def of(cls, data_dir: Path, feats_dir: Path, tokenizer_model: Path) -> "IndexSources":
        return cls(
            data_dir / "text",
            data_dir / "utt2spk",
            feats_dir / "feats.scp",
            feats_dir / "utt2num_frames",
            feats_dir / "cmvn.scp",
            feats_dir / "cmvn_type",
            tokenizer_model,
        )

    def paths(self) -> list[Path]:
        return [self.text, self.utt2spk, self.feats_scp, self.utt2num_frames, self.cmvn_scp, self.cmvn_type]


class NpyColumns:
    """Arrays written to `<directory>/<name>.npy` a chunk at a time. Each file's header is written
    first for a length of 0 and again on close for the length written: numpy pads a header to 64
    bytes, so both take the same room."""

    def __init__(self, directory: Path, dtypes: dict[str, type]):
        self.dtypes = {name: np.dtype(dtype) for name, dtype in dtypes.items()}
        self.files = {name: open(directory / f"{name}.npy", "wb") for name in dtypes}
        self.counts = dict.fromkeys(dtypes, 0)
        self.header_bytes = {name: self._write_header(name) for name in dtypes}

    def append(self, name: str, values) -> None:
        values = np.asarray(values, dtype=self.dtypes[name])
        values.tofile(self.files[name])
        self.counts[name] += len(values)

    def close(self) -> None:
        for name, f in self.files.items():
            if self._write_header(name) != self.header_bytes[name]:
                raise RuntimeError(f"{f.name}: the .npy header changed size")  # only past 10**40 values
            f.close()

    def _write_header(self, name: str) -> int:
        f = self.files[name]
        f.seek(0)
        header = {
            "descr": np.lib.format.dtype_to_descr(self.dtypes[name]),
            "fortran_order": False,
            "shape": (self.counts[name],),
        }
        np.lib.format.write_array_header_1_0(f, header)
        size = f.tell()
        f.seek(0, os.SEEK_END)
        return size


class IndexBuilder:
    """One streaming pass over the sorted inputs into the index's arrays in `out`, written every
    ENCODE_CHUNK utterances, so what it holds does not grow with the set."""

    def __init__(self, sources: IndexSources, tokenizer, out: Path):
        self.sources, self.tokenizer = sources, tokenizer
        self.columns = NpyColumns(out, COLUMN_TYPES)
        self.columns.append("utt_offsets", [0])
        self.columns.append("token_offsets", [0])
        self.utt_end, self.token_end = 0, 0  # the offsets written last
        self.count = 0
        self.files: dict[str, int] = {}
        self.raw_feats: dict[int, str] = {}
        self.empty, self.empty_examples = 0, []
        self.without_text = 0
        self.pending: list[tuple[str, int, str, str]] = []  # (utt, frames, feats entry, speaker) awaiting tokens
        self.pending_texts: list[str] = []
        self.cmvn = CmvnKeys(sources)
        self._new_chunk()

    def _new_chunk(self) -> None:
        self.utt_bytes, self.utt_lengths = bytearray(), array.array("q")
        self.frames, self.feat_file, self.feat_offset = array.array("i"), array.array("i"), array.array("q")
        self.tokens, self.token_lengths = array.array("i"), array.array("q")
        self.cmvn_of = array.array("i")

    def build(self) -> dict:
        """The pass, the arrays closed; returns meta.json's contents."""
        s = self.sources
        if not s.feats_scp.is_file():
            raise InputError(f"{s.feats_scp}: missing; run the features stage for this set")
        commands.check_table(s.feats_scp, commands.scp_command)
        texts, speakers, lengths = Lookup(s.text), Lookup(s.utt2spk), Lookup(s.utt2num_frames)
        if not s.utt2num_frames.is_file():
            raise InputError(
                f"{s.utt2num_frames}: missing; re-run the features stage (it writes each utterance's frame count)"
            )
        try:
            for lineno, utt, entry in sorted_table(s.feats_scp):
                text = texts.get(utt)
                if text is None:
                    self.without_text += 1
                    continue
                frames = lengths.get(utt)
                if frames is None:
                    raise InputError(
                        f"{s.utt2num_frames}: no frame count for {utt!r} (feats.scp line {lineno}); "
                        "re-run the features stage"
                    )
                self.pending.append((utt, int(frames), entry, speakers.get(utt) or utt))
                self.pending_texts.append(text)
                if len(self.pending) >= ENCODE_CHUNK:
                    self._flush()
            self._flush()
        finally:
            self.columns.close()  # on an error too: the caller's temporary directory is removed
        return self._meta()

    def _flush(self) -> None:
        for (utt, frames, entry, speaker), ids in zip(self.pending, self.tokenizer.sp.encode(self.pending_texts)):
            if not ids:
                self.empty += 1
                if len(self.empty_examples) < 10:
                    self.empty_examples.append(utt)
                continue
            self._add(utt, frames, entry, speaker, ids)
        self.pending, self.pending_texts = [], []
        self._write_chunk()

    def _add(self, utt: str, frames: int, entry: str, speaker: str, ids: list[int]) -> None:
        encoded = utt.encode()
        self.utt_bytes += encoded
        self.utt_lengths.append(len(encoded))
        self.frames.append(frames)
        self.tokens.extend(ids)
        self.token_lengths.append(len(ids))
        location = ark_location(entry)
        if location is None:
            self.raw_feats[self.count] = entry
            self.feat_file.append(-1)
            self.feat_offset.append(-1)
        else:
            self.feat_file.append(self.files.setdefault(location[0], len(self.files)))
            self.feat_offset.append(location[1])
        self.cmvn_of.append(self.cmvn.entry_of(utt, speaker))
        self.count += 1

    def _write_chunk(self) -> None:
        out = self.columns
        tokens = np.asarray(self.tokens, np.int32)
        token_offsets = np.concatenate([[0], np.cumsum(self.token_lengths, dtype=np.int64)])
        utt_ends = self.utt_end + np.cumsum(self.utt_lengths, dtype=np.int64)
        for name, values in (
            ("utt_bytes", np.frombuffer(bytes(self.utt_bytes), np.uint8)),
            ("utt_offsets", utt_ends),
            ("frames", self.frames),
            ("tokens", tokens),
            ("token_offsets", self.token_end + token_offsets[1:]),
            ("min_frames", ctc_min_frames(tokens, token_offsets)),
            ("feat_file", self.feat_file),
            ("feat_offset", self.feat_offset),
            ("cmvn_of", self.cmvn_of),
        ):
            out.append(name, values)
        file_of, offset_of = self.cmvn.take_locations()
        out.append("cmvn_file", file_of)
        out.append("cmvn_offset", offset_of)
        self.utt_end += len(self.utt_bytes)
        self.token_end += len(tokens)
        self._new_chunk()

    def _meta(self) -> dict:
        return {
            "version": INDEX_VERSION,
            "feat_files": list(self.files),
            "raw_feats": {str(k): v for k, v in self.raw_feats.items()},
            "without_text": self.without_text,
            "empty_transcripts": self.empty,
            "empty_examples": self.empty_examples,
            "cmvn_unit": self.cmvn.unit,
            "cmvn_files": list(self.cmvn.files),
            "raw_cmvn": self.cmvn.raw,
        }


class CmvnKeys:
    """The CMVN entry of each utterance, by the unit in cmvn_type; entries numbered as met."""

    def __init__(self, sources: IndexSources):
        self.unit = sources.cmvn_type.read_text().strip() if sources.cmvn_type.is_file() else "none"
        if self.unit not in ("utterance", "speaker", "global", "none"):
            raise InputError(f"{sources.cmvn_type}: unknown CMVN unit {self.unit!r}; re-run the features stage")
        self.path = sources.cmvn_scp
        self.entries: dict[str, int] = {}
        self.files: dict[str, int] = {}
        self.raw: dict[str, str] = {}
        self.count = 0
        self.file_of, self.offset_of = array.array("i"), array.array("q")  # of the entries since take_locations
        self.table = self._load_small_table() if self.unit in ("speaker", "global") else None
        self.sequential = Lookup(self.path) if self.unit == "utterance" else None
        if self.unit != "none":
            commands.check_table(self.path, commands.scp_command)

    def _load_small_table(self) -> dict[str, str]:
        if not self.path.is_file():
            raise InputError(f"{self.path}: missing CMVN statistics; re-run the features stage")
        return {key: value for _, key, value in iter_table(self.path)}

    def entry_of(self, utt: str, speaker: str) -> int:
        if self.unit == "none":
            return -1
        key = {"utterance": utt, "speaker": speaker, "global": "global"}[self.unit]
        if key in self.entries:
            return self.entries[key]
        value = self.sequential.get(key) if self.sequential is not None else self.table.get(key)
        if value is None:
            raise InputError(f"{self.path}: no CMVN statistics for {key!r} ({self.unit}); re-run the features stage")
        n = self.count
        self.count += 1
        location = ark_location(value)
        if location is None:
            self.raw[str(n)] = value
            self.file_of.append(-1)
            self.offset_of.append(-1)
        else:
            self.file_of.append(self.files.setdefault(location[0], len(self.files)))
            self.offset_of.append(location[1])
        if self.unit != "utterance":
            self.entries[key] = n  # per-utterance keys are never looked up again: not kept
        return n

    def take_locations(self) -> tuple[array.array, array.array]:
        """(file, offset) of the entries met since the last call."""
        out = self.file_of, self.offset_of
        self.file_of, self.offset_of = array.array("i"), array.array("q")
        return out


class TrainingIndex:
    """The memory-mapped arrays of one set, and reading an utterance's features through them."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.meta = json.loads((directory / "meta.json").read_text())
        for name in ARRAYS:
            setattr(self, name, np.load(directory / f"{name}.npy", mmap_mode="r"))
        self._shared_cmvn: dict[int, np.ndarray] = {}  # per-speaker / global statistics, read once

    def __len__(self) -> int:
        return len(self.frames)

    def utt(self, i: int) -> str:
        return bytes(self.utt_bytes[self.utt_offsets[i] : self.utt_offsets[i + 1]]).decode()

    def token_ids(self, i: int) -> np.ndarray:
        return np.asarray(self.tokens[self.token_offsets[i] : self.token_offsets[i + 1]], dtype=np.int64)

    def features(self, i: int) -> np.ndarray:
        raw = self.meta["raw_feats"].get(str(i))
        if raw is not None:
            return _read_raw(raw, f"feats.scp entry of {self.utt(i)}")
        return read_ark(self.meta["feat_files"][self.feat_file[i]], int(self.feat_offset[i]))

    def cmvn_stats(self, i: int) -> np.ndarray | None:
        if self.meta["cmvn_unit"] == "none":
            return None
        entry = int(self.cmvn_of[i])
        if self.meta["cmvn_unit"] == "utterance":
            return self._read_cmvn(entry)
        if entry not in self._shared_cmvn:
            self._shared_cmvn[entry] = self._read_cmvn(entry)
        return self._shared_cmvn[entry]

    def _read_cmvn(self, entry: int) -> np.ndarray:
        raw = self.meta["raw_cmvn"].get(str(entry))
        if raw is not None:
            return _read_raw(raw, "cmvn.scp entry")
        path = self.meta["cmvn_files"][self.cmvn_file[entry]]
        try:
            return read_ark(path, int(self.cmvn_offset[entry]))
        except Exception as err:  # kaldiio asserts, or raises assorted errors, on a truncated ark
            raise InputError(
                f"{path}: unreadable CMVN statistics ({error_detail(err)}); "
                f"delete {Path(path).parent} and re-run the features stage"
            ) from None


def read_ark(path: str, offset: int) -> np.ndarray:
    return np.asarray(kaldiio.load_mat(f"{path}:{offset}"))


def _read_raw(entry: str, what: str) -> np.ndarray:
    try:
        return np.asarray(kaldiio.load_mat(entry))
    except Exception as err:  # kaldiio raises assorted errors for commands and ranges
        raise InputError(f"{what}: cannot read {entry!r} ({error_detail(err)})") from None


def load_index(sources: IndexSources, tokenizer, root: Path, build: bool) -> TrainingIndex | None:
    """The index for `sources` under `root` (the feature set's dir), built if `build` and
    missing; None if missing and not to be built here."""
    directory = root / f"index.{fingerprint(sources.paths(), sources.tokenizer_model)}"
    if (directory / "meta.json").is_file():
        return TrainingIndex(directory)
    if not build:
        return None
    with atomic_dir(directory, replace=False) as tmp:  # another learner's finished copy may be in use
        builder = IndexBuilder(sources, tokenizer, tmp)
        meta = builder.build()
        (tmp / "meta.json").write_text(json.dumps(meta) + "\n")
    for stale in root.glob("index.*"):
        if stale != directory and stale.is_dir() and not stale.name.startswith("."):
            _remove(stale)
    log.info(
        "%s: index of %d utterances (%d without a transcript, %d with an empty one)",
        directory,
        builder.count,
        meta["without_text"],
        meta["empty_transcripts"],
    )
    return TrainingIndex(directory)


def _remove(directory: Path) -> None:
    for child in directory.iterdir():
        child.unlink()
    os.rmdir(directory)
