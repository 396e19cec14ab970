"""A feature set: the features stage's output for one data set, as every later stage reads it.

    <features.feats_dir>/<features.name>/<set>/
        feats.scp, feats.ark   the stored matrices (kaldiio; Kaldi reads them as they are),
                               compressed as Kaldi's `copy-feats --compress=true` writes them
                               unless features.compress=false
        feat_dim               the dimension per frame (what the model's input is built for)
        delta_opts, delta_columns   when present: the reader appends deltas (Kaldi's add-deltas
                               with delta_opts) of the stored columns [first, last) that
                               delta_columns names, as Kaldi's training pipelines do on the fly
        utt2num_frames         frames per utterance (so samplers work without reading a matrix)
        cmvn.scp, cmvn.ark, cmvn_type   CMVN statistics and their unit (asr/features/cmvn.py)

`FeatureReader` reads one set's matrices, deltas appended and CMVN applied (the statistics are
those of the matrices with their deltas); a matrix with NaN/inf values is refused
(NonFiniteFeatures) naming the utterance. `FeatureWriter` writes them.

Torch is imported where a tensor is made: the GMM stages read numpy matrices
(`FeatureReader.matrix`) and their processes start without it (its import costs 1.5 s of CPU).
"""

from __future__ import annotations

import io
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import kaldiio
import numpy as np
from kaldiio.compression_header import GlobalHeader, PerColHeader

from asr.features.cmvn import CmvnApplier
from asr.features.deltas import add_deltas, delta_opts, delta_scales
from asr.kaldi import commands
from asr.kaldi.table import c_sort_key, read_table
from asr.utils.errors import InputError, error_detail
from asr.utils.record import record_path, verify

if TYPE_CHECKING:
    from torch import Tensor

log = logging.getLogger(__name__)


def feature_set_dir(cfg, set_name: str) -> Path:
    """`<features.feats_dir>/<features.name>/<set>`: where the features stage writes a set."""
    return Path(cfg.features.feats_dir) / cfg.features.name / set_name


def feature_set_input(set_dir: str | os.PathLike) -> Path:
    """What names a feature set among another stage's inputs: the set's stage record, which the
    features stage writes again whenever it makes the set again; for a set no record lists
    (made by Kaldi, or before records), its feats.scp."""
    record = record_path(set_dir, "features")
    return record if record.is_file() else Path(set_dir) / "feats.scp"


def read_feat_dim(set_dir: str | os.PathLike) -> int:
    path = Path(set_dir) / "feat_dim"
    try:
        return int(path.read_text().split()[0])
    except FileNotFoundError:
        raise InputError(f"{path}: missing; run the features stage for this set") from None
    except (ValueError, IndexError):
        raise InputError(f"{path}: expected one integer (the feature dimension); re-run the features stage") from None


def read_num_frames(set_dir: Path, feats: dict) -> dict[str, int]:
    """utt2num_frames, or (for features made elsewhere without it) the matrices' lengths."""
    path = set_dir / "utt2num_frames"
    if path.is_file():
        try:
            return {u: int(n) for u, n in read_table(path).items()}
        except ValueError:
            raise InputError(f"{path}: frame counts must be integers; re-run the features stage") from None
    log.warning("%s: missing; reading every matrix to get its length", path)
    return {u: int(feats[u].shape[0]) for u in feats}


DELTA_COLUMNS = "delta_columns"
KALDI_AUTOMATIC_COMPRESSION = 1  # CompressedMatrix's kAutomaticMethod: 1 byte per value for > 8 frames


@dataclass(frozen=True)
class LoadDeltas:
    """Deltas of the stored columns [first, last) appended on reading: [x | delta x[:, first:last] | ...]."""

    order: int
    window: int
    first: int
    last: int

    @property
    def added_dim(self) -> int:
        return (self.last - self.first) * self.order

    def __call__(self, stored: np.ndarray) -> np.ndarray:
        width = self.last - self.first
        deltas = add_deltas(stored[:, self.first : self.last], self.order, self.window)[:, width:]
        return np.concatenate([stored, deltas.astype(stored.dtype, copy=False)], axis=1)

    def write(self, set_dir: Path) -> None:
        (set_dir / "delta_opts").write_text(delta_opts(self.order, self.window))
        (set_dir / DELTA_COLUMNS).write_text(f"{self.first} {self.last}\n")

    @classmethod
    def read(cls, set_dir: Path) -> "LoadDeltas | None":
        """None for a set without delta_columns (its matrices are used as stored)."""
        columns = set_dir / DELTA_COLUMNS
        if not columns.is_file():
            return None
        try:
            first, last = (int(v) for v in columns.read_text().split())
            opts = dict(part.lstrip("-").split("=") for part in (set_dir / "delta_opts").read_text().split())
            return cls(int(opts["delta-order"]), int(opts["delta-window"]), first, last)
        except FileNotFoundError:
            raise InputError(f"{set_dir / 'delta_opts'}: missing beside {columns}; re-run the features stage") from None
        except (ValueError, KeyError):
            raise InputError(
                f"{columns}: expected 'first last' columns and a delta_opts with --delta-order and "
                "--delta-window; re-run the features stage"
            ) from None


@dataclass(frozen=True)
class FeatureLayout:
    """How a set's stored matrices become the model's input: their width, and the deltas added."""

    feat_dim: int
    deltas: LoadDeltas | None = None

    @property
    def stored_dim(self) -> int:
        return self.feat_dim - (self.deltas.added_dim if self.deltas else 0)

    def expand(self, stored: np.ndarray) -> np.ndarray:
        return self.deltas(stored) if self.deltas else stored

    @classmethod
    def read(cls, set_dir: str | os.PathLike) -> "FeatureLayout":
        return cls(read_feat_dim(set_dir), LoadDeltas.read(Path(set_dir)))


class FeatureWriter:
    """Matrices into `<name>.ark` + `<name>.scp` (kaldiio's writer, Kaldi's format), compressed as
    Kaldi's `copy-feats --compress=true` does when `compress`. Each call returns the matrix as a
    reader will get it back, so statistics can be computed on exactly that."""

    def __init__(self, ark: Path, scp: Path, compress: bool):
        self.ark_path, self.scp_path, self.compress = Path(ark), Path(scp), compress
        self.method = KALDI_AUTOMATIC_COMPRESSION if compress else None
        self.ark = open(self.ark_path, "wb")
        self.scp = open(self.scp_path, "w", encoding="utf-8")

    def __call__(self, key: str, matrix: np.ndarray) -> np.ndarray:
        matrix = np.ascontiguousarray(matrix, dtype=np.float32)
        record = io.BytesIO()
        kaldiio.save_ark(record, {key: matrix}, compression_method=self.method)
        self.scp.write(f"{key} {self.ark_path}:{self.ark.tell() + len(key.encode()) + 1}\n")
        self.ark.write(record.getvalue())
        if not self.compress:
            return matrix
        record.seek(0)
        return next(iter(kaldiio.load_ark(record)))[1]

    def close(self) -> None:
        self.ark.close()
        self.scp.close()

    def __enter__(self) -> "FeatureWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def non_finite_problem(feats: np.ndarray) -> str | None:
    """What is wrong with a feature matrix holding NaN or inf values (the audio had such
    samples, or is damaged); None when every value is finite."""
    if np.isfinite(feats).all():
        return None
    nan, inf = int(np.isnan(feats).sum()), int(np.isinf(feats).sum())
    return (
        f"features with non-finite values ({nan} NaN, {inf} inf of {feats.size}): "
        "NaN/inf audio samples or damaged audio"
    )


class NonFiniteFeatures(InputError):
    """A feature matrix with NaN or inf values: it would make every loss and output it enters
    NaN. The features stage never writes one; features made elsewhere can hold them."""


class FeatureReader:
    """Feature matrices of one set, CMVN applied, by utterance id. A matrix with NaN/inf
    values raises NonFiniteFeatures naming the utterance (decoding skips it, with a list)."""

    def __init__(self, feats_set_dir: str | os.PathLike, utt2spk: dict[str, str], norm_vars: bool = True):
        self.set_dir = Path(feats_set_dir)
        scp = self.set_dir / "feats.scp"
        if not scp.is_file():
            raise InputError(f"{scp}: missing; run the features stage for this set")
        for name in ("feats.scp", "feats.ark", "utt2num_frames", "cmvn.scp", "cmvn.ark"):
            verify(self.set_dir / name, "feature set file")
        self.feats = commands.load_scp(scp)
        self.num_frames = read_num_frames(self.set_dir, self.feats)
        self.layout = FeatureLayout.read(self.set_dir)
        self.feat_dim = self.layout.feat_dim
        self.cmvn = CmvnApplier(self.set_dir, utt2spk, norm_vars)
        self.augment = None  # training-time masking (asr.features.specaugment), set by the trainer

    def utts(self) -> list[str]:
        return sorted(set(self.feats.keys()) & set(self.num_frames), key=c_sort_key)

    def __call__(self, utt: str, index: int = 0) -> Tensor:
        """`index`: the utterance's place in its dataset, which seeds its augmentation."""
        feats = as_tensor(self.matrix(utt))
        return self.augment(feats, index) if self.augment is not None else feats

    def matrix(self, utt: str) -> np.ndarray:
        """The utterance's matrix as `self(utt)` returns it without augmentation, in numpy."""
        return checked_features(
            self.set_dir, utt, self.layout, lambda: self.feats[utt], lambda mat: self.cmvn(utt, mat)
        )

    def rows(self, utt: str, start: int, stop: int) -> Tensor:
        """Rows [start, stop) of what `self(utt)` returns (no augmentation), decoding only those
        rows and the deltas' reach around them: a training sample of 21 frames then costs a
        small part of its utterance's decoding (asr/train/chunks.py). Deltas clamp at the
        utterance's ends only, so the rows equal the whole matrix's exactly."""
        reach = self.layout.deltas.order * self.layout.deltas.window if self.layout.deltas else 0
        first, last = max(0, start - reach), min(self.num_frames[utt], stop + reach)
        keep = slice(start - first, stop - first)
        read = lambda: self._rows_reader.read(self.feats, utt, first, last)  # noqa: E731
        return as_tensor(checked_features(self.set_dir, utt, self.layout, read, lambda mat: self.cmvn(utt, mat[keep])))

    def samples(self, utts: Sequence[str], starts: Sequence[int], length: int) -> Tensor:
        """(B, length, D): rows [start, start + length) of each utterance, equal to `rows`'s, for
        a batch of training samples. Compressed (CM) matrices, Kaldi's default, are decoded
        together: each sample's bytes gathered with its deltas' reach (indices clamped at the
        utterance's ends, as the deltas' edge padding does) and the batch decoded, its deltas
        taken, in a few numpy operations instead of a dozen per sample. Others go through `rows`."""
        reach = self.layout.deltas.order * self.layout.deltas.window if self.layout.deltas else 0
        out = np.empty((len(utts), length, self.feat_dim), dtype=np.float32)
        fast, gathered, headers = [], [], []
        for i, (utt, start) in enumerate(zip(utts, starts)):
            try:
                found = self._rows_reader.columns(self.feats, utt)
            except (OSError, ValueError):  # a missing or truncated ark: `rows` says so, naming the utterance
                found = None
            if found is None or found[0].shape != (self.layout.stored_dim, self.num_frames[utt]):
                out[i] = self.rows(utt, start, start + length).numpy()
                continue
            values, percentiles = found
            rows = np.clip(np.arange(start - reach, start + length + reach), 0, values.shape[1] - 1)
            fast.append(i)
            gathered.append(values[:, rows])
            headers.append(percentiles)
        if fast:
            stored = decode_columns(np.stack(gathered), np.stack(headers)).transpose(
                0, 2, 1
            )  # (n, length + 2 reach, stored)
            for i, mat in zip(fast, self._expanded(stored, reach, length)):
                out[i] = self.cmvn(utts[i], mat)
                if not np.isfinite(out[i]).all():
                    out[i] = self.rows(
                        utts[i], starts[i], starts[i] + length
                    ).numpy()  # raises, naming the utterance and the cause
        return as_tensor(out)

    def _expanded(self, stored: np.ndarray, reach: int, length: int) -> np.ndarray:
        """The samples' rows (reach trimmed) with their deltas appended, computed as add_deltas
        does (float64, the same taps in the same order), so the values are bit for bit its."""
        middle = stored[:, reach : reach + length]
        if not self.layout.deltas:
            return middle
        d = self.layout.deltas
        x = stored[:, :, d.first : d.last].astype(np.float64)
        blocks = [middle]
        for taps in delta_scales(d.order, d.window)[1:]:
            half = len(taps) // 2
            acc = np.zeros((len(x), length, d.last - d.first), dtype=np.float64)
            for offset, weight in zip(range(-half, half + 1), taps):
                if weight != 0.0:
                    acc += weight * x[:, reach + offset : reach + offset + length]
            blocks.append(acc.astype(np.float32))
        return np.concatenate(blocks, axis=2)

    @property
    def _rows_reader(self) -> "ArkRows":
        if not hasattr(self, "_ark_rows"):
            self._ark_rows = ArkRows()
        return self._ark_rows


class ArkRows:
    """Rows of Kaldi matrices in ark files, read through a memory map of each ark: compressed
    matrices (CM: one byte per value, column-major under per-column headers; CM2/CM3: row-major)
    and float matrices are decoded for the rows asked for only. Other scp entries (commands,
    ranges) are read whole and sliced."""

    def __init__(self):
        self.maps: dict[str, np.ndarray] = {}

    def __getstate__(self) -> dict:
        return {"maps": {}}  # a process maps the arks anew (pickled, a map would copy the ark's bytes)

    def read(self, scp, utt: str, first: int, last: int) -> np.ndarray:
        location = scp._dict[utt] if hasattr(scp, "_dict") else None
        path, sep, offset = location.rpartition(":") if isinstance(location, str) else ("", "", "")
        if sep and offset.isdigit() and not commands.is_pipe(location):
            rows = self._rows(path, int(offset), first, last)
            if rows is not None:
                return rows
        return np.asarray(scp[utt])[first:last]

    def columns(self, scp, utt: str) -> tuple[np.ndarray, np.ndarray] | None:
        """A CM (one byte per value) matrix's bytes as (cols, rows) and its per-column
        percentiles (cols, 4) as floats; None for every other kind of entry or matrix."""
        location = scp._dict[utt] if hasattr(scp, "_dict") else None
        path, sep, offset = location.rpartition(":") if isinstance(location, str) else ("", "", "")
        if not (sep and offset.isdigit()) or commands.is_pipe(location):
            return None
        data, offset = self._map(path), int(offset)
        if bytes(data[offset : offset + 5]) != b"\0BCM ":
            return None
        low, span = (float(v) for v in data[offset + 5 : offset + 13].view("<f4"))
        rows, cols = (int(v) for v in data[offset + 13 : offset + 21].view("<i4"))
        header = GlobalHeader("CM", low, span, rows, cols, "<")
        body = offset + 21
        percentiles = header.uint_to_float(np.frombuffer(bytes(data[body : body + 8 * cols]), dtype="<u2")).reshape(
            cols, 4
        )
        return data[body + 8 * cols : body + 8 * cols + rows * cols].reshape(cols, rows), percentiles

    def _map(self, path: str) -> np.ndarray:
        if path not in self.maps:
            self.maps[path] = np.asarray(
                np.memmap(path, dtype=np.uint8, mode="r")
            )  # a plain view: slicing a memmap costs more
        return self.maps[path]

    def _rows(self, path: str, offset: int, first: int, last: int) -> np.ndarray | None:
        data = self._map(path)
        if bytes(data[offset : offset + 2]) != b"\0B":
            return None  # a text matrix: read whole
        token = bytes(data[offset + 2 : offset + 6])
        if token[:3] in (b"CM ", b"FM ", b"DM "):
            kind, body = token[:2].decode(), offset + 5
        elif token in (b"CM2 ", b"CM3 "):
            kind, body = token[:3].decode(), offset + 6
        else:
            return None
        if kind in ("FM", "DM"):  # then \4 rows \4 cols (int32 each), then the rows
            cols = int(np.frombuffer(bytes(data[body + 6 : body + 10]), "<i4")[0])
            size = 4 if kind == "FM" else 8
            values = bytes(data[body + 10 + first * cols * size : body + 10 + last * cols * size])
            return np.frombuffer(values, "<f4" if kind == "FM" else "<f8").reshape(-1, cols)
        header = GlobalHeader.read(io.BytesIO(bytes(data[body : body + 16])), kind, "<")
        body += 16
        rows, cols = header.rows, header.cols
        if kind == "CM":
            columns = PerColHeader.read(io.BytesIO(bytes(data[body : body + 8 * cols])), header)
            body += 8 * cols
            values = np.asarray(data[body : body + rows * cols]).reshape(cols, rows)[:, first:last]
            return columns.char_to_float(np.ascontiguousarray(values)).T
        width = 2 if kind == "CM2" else 1
        values = (
            np.asarray(data[body : body + width * rows * cols])
            .view("<u2" if width == 2 else "u1")
            .reshape(rows, cols)[first:last]
        )
        return header.uint_to_float(np.array(values, dtype=np.float32))


def decode_columns(values: np.ndarray, percentiles: np.ndarray) -> np.ndarray:
    """Kaldi's CM decoding (kaldiio's PerColHeader.char_to_float, the same float32 operations)
    of bytes (..., cols, rows) under percentiles (..., cols, 4): piecewise linear between each
    column's 0th, 25th, 75th and 100th percentiles."""
    v = values.astype(np.float32)
    p0, p25, p75, p100 = (percentiles[..., k : k + 1] for k in range(4))
    return np.where(
        v <= 64,
        p0 + (p25 - p0) * v * (1 / 64.0),
        np.where(v <= 192, p25 + (p75 - p25) * (v - 64.0) * (1 / 128.0), p75 + (p100 - p75) * (v - 192.0) * (1 / 63.0)),
    )


def checked_features(
    set_dir: Path,
    utt: str,
    layout: FeatureLayout,
    read: Callable[[], np.ndarray],
    normalise: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray:
    """One utterance's matrix from `read()`, deltas appended and normalised: an unreadable ark,
    a matrix of another width than the layout stores, or NaN/inf after normalisation is an
    InputError naming the utterance."""
    try:
        mat = read()
    except InputError:
        raise
    except Exception as err:  # kaldiio raises assorted errors for a truncated/missing ark
        raise InputError(
            f"{set_dir / 'feats.scp'}: cannot read features of {utt!r} ({error_detail(err)}); re-run the features stage"
        ) from None
    if mat.ndim != 2 or mat.shape[1] != layout.stored_dim:
        source = "feat_dim" + (f" less the deltas of {DELTA_COLUMNS}" if layout.deltas else "")
        raise InputError(f"{set_dir}: {utt!r} has shape {mat.shape}, expected (T, {layout.stored_dim}) from {source}")
    mat = layout.expand(mat)
    normalised = normalise(mat)
    if not np.isfinite(normalised).all():
        where = "its features" if not np.isfinite(mat).all() else "its CMVN statistics (cmvn.scp)"
        raise NonFiniteFeatures(
            f"{set_dir / 'feats.scp'}: utterance {utt!r}: NaN/inf values in {where}; remove it "
            "from the data dir, or make the features again (the features stage skips such utterances)"
        )
    return normalised


def as_tensor(matrix: np.ndarray) -> Tensor:
    """The matrix as a tensor sharing its memory."""
    import torch  # here, not above: see the module's docstring

    return torch.from_numpy(matrix)
