"""Kaldi's event maps (the decision tree's nodes) in Python and the `tree` file that holds them.

A context-dependency tree maps an *event* (key -> value: context position 0..N-1 -> phone,
`PDF_CLASS` (-1) -> the HMM state's pdf-class) to a pdf id. Kaldi has three kinds of node
(src/tree/event-map.h), mirrored here as `Constant`, `Table` and `Split`.

The file is Kaldi's binary `ContextDependency` (what `build-tree` writes and `gmm-init-model`,
`compile-train-graphs` read): `\\0B`, then the tokens and int32s of src/tree/context-dep.cc and
src/tree/event-map.cc:

    ContextDependency <N> <P> ToPdf <node> EndContextDependency
    <node> = CE <answer>
           | TE <key> <uint32 size> ( <node or NULL> ... )
           | SE <key> <int32 vector: yes set> { <yes node> <no node> }

an int32 being a size byte 4 and 4 little-endian bytes (-4 for the unsigned table size), a
token its text and a space, an integer vector a size byte, an int32 count and the values.
kaldi_hmm_gmm's `ContextDependency` pickles through exactly these bytes (without `\\0B`), so
`context_dependency` hands a tree to the library without a file. `read_roots` reads the lang
dir's `phones/roots.{int,txt}` (which phones share a root); `write_kaldi_tree_stats` and
`read_kaldi_tree_stats` Kaldi's binary tree statistics (`treeacc`: `BTS`, then per event `EV`,
its (key, value) pairs, `T` and a GaussClusterable `GCL` <float count> <float floor> `DM` 2 x D).
"""

from __future__ import annotations

import io
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Union

import kaldi_hmm_gmm as khg
import numpy as np

from asr.kaldi.binary import BINARY_MARK, KaldiBinaryReader
from asr.utils.atomic import atomic_open
from asr.utils.errors import InputError
from asr.utils.record import verify

PDF_CLASS = -1  # Kaldi's kPdfClass: the event key whose value is the HMM state's pdf-class
VAR_FLOOR = 0.01  # acc-tree-stats' --var-floor


@dataclass(frozen=True)
class Constant:
    """A leaf: every event reaching it maps to `answer` (a pdf id, or a leaf number while building)."""

    answer: int


@dataclass(frozen=True)
class Table:
    """Branches on the value of `key`: event value v goes to table[v] (None: no answer)."""

    key: int
    table: tuple["Node | None", ...]


@dataclass(frozen=True)
class Split:
    """A yes/no question: is the value of `key` in `yes_set` (sorted)?"""

    key: int
    yes_set: tuple[int, ...]
    yes: "Node"
    no: "Node"


Node = Union[Constant, Table, Split]


def map_event(node: Node, event: dict[int, int]) -> int | None:
    """The answer for an event (key -> value), or None where the tree has none (Kaldi's Map)."""
    while True:
        if isinstance(node, Constant):
            return node.answer
        value = event.get(node.key)
        if value is None:
            return None
        if isinstance(node, Table):
            node = node.table[value] if 0 <= value < len(node.table) else None
            if node is None:
                return None
        else:
            node = node.yes if value in node.yes_set else node.no


def leaf_answers(node: Node | None) -> set[int]:
    """Every answer the tree can give (Kaldi's MultiMap of the empty event)."""
    if node is None:
        return set()
    if isinstance(node, Constant):
        return {node.answer}
    if isinstance(node, Table):
        return set().union(*(leaf_answers(child) for child in node.table))
    return leaf_answers(node.yes) | leaf_answers(node.no)


def map_answers(node: Node | None, mapping: dict[int, int]) -> Node | None:
    """The same tree with each leaf's answer replaced through `mapping` (Kaldi's Copy(mapping))."""
    if node is None:
        return None
    if isinstance(node, Constant):
        return Constant(mapping.get(node.answer, node.answer))
    if isinstance(node, Table):
        return Table(node.key, tuple(map_answers(child, mapping) for child in node.table))
    return Split(node.key, node.yes_set, map_answers(node.yes, mapping), map_answers(node.no, mapping))


# ---- Kaldi binary -------------------------------------------------------------------------


def _token(out: io.BytesIO, token: str) -> None:
    out.write(token.encode() + b" ")


def _int32(out: io.BytesIO, value: int) -> None:
    out.write(struct.pack("<bi", 4, value))


def _write_node(out: io.BytesIO, node: Node | None) -> None:
    if node is None:
        _token(out, "NULL")
    elif isinstance(node, Constant):
        _token(out, "CE")
        _int32(out, node.answer)
    elif isinstance(node, Table):
        _token(out, "TE")
        _int32(out, node.key)
        out.write(struct.pack("<bI", -4, len(node.table)))
        _token(out, "(")
        for child in node.table:
            _write_node(out, child)
        _token(out, ")")
    else:
        _token(out, "SE")
        _int32(out, node.key)
        out.write(struct.pack(f"<bi{len(node.yes_set)}i", 4, len(node.yes_set), *node.yes_set))
        _token(out, "{")
        _write_node(out, node.yes)
        _write_node(out, node.no)
        _token(out, "}")


def event_map_bytes(tree: Node) -> bytes:
    """The tree alone as Kaldi's binary EventMap::Write writes it."""
    out = io.BytesIO()
    _write_node(out, tree)
    return out.getvalue()


def tree_bytes(tree: Node, context_width: int = 3, central_position: int = 1) -> bytes:
    """The tree as Kaldi's binary ContextDependency object (no `\\0B` mark)."""
    out = io.BytesIO()
    _token(out, "ContextDependency")
    _int32(out, context_width)
    _int32(out, central_position)
    _token(out, "ToPdf")
    _write_node(out, tree)
    _token(out, "EndContextDependency")
    return out.getvalue()


def context_dependency(tree: Node, context_width: int = 3, central_position: int = 1) -> khg.ContextDependency:
    """The tree as kaldi_hmm_gmm's ContextDependency (loaded by Kaldi's own Read)."""
    data = tree_bytes(tree, context_width, central_position)
    ctx_dep = khg.ContextDependency.__new__(khg.ContextDependency)
    ctx_dep.__setstate__((list(struct.unpack(f"{len(data)}b", data)),))
    return ctx_dep


def write_tree(path: str | os.PathLike, tree: Node, context_width: int = 3, central_position: int = 1) -> None:
    """Write Kaldi's binary `tree` file atomically."""
    with atomic_open(path, "wb") as f:
        f.write(BINARY_MARK + tree_bytes(tree, context_width, central_position))


def _read_node(r: KaldiBinaryReader, depth: int = 0) -> Node | None:
    if depth > 10_000:
        raise r.fail("tree deeper than 10000 nodes")
    kind = r.expect("NULL", "CE", "TE", "SE")
    if kind == "NULL":
        return None
    if kind == "CE":
        return Constant(r.int32())
    key = r.int32()
    if kind == "TE":
        size = _uint32(r)
        r.expect("(")
        table = tuple(_read_node(r, depth + 1) for _ in range(size))
        r.expect(")")
        return Table(key, table)
    yes_set = tuple(r.int_vector())  # its element size byte (4) reads as the count's
    r.expect("{")
    yes, no = _read_node(r, depth + 1), _read_node(r, depth + 1)
    r.expect("}")
    if yes is None or no is None:
        raise r.fail("a split without both branches")
    return Split(key, yes_set, yes, no)


def read_tree_stream(f: BinaryIO, name: str) -> tuple[Node, int, int]:
    """(tree, context width, central position) from a stream positioned after `\\0B`."""
    r = KaldiBinaryReader(f, name, "tree")
    r.expect("ContextDependency")
    width, central = r.int32(), r.int32()
    if r.expect("ToPdf", "ToLength") == "ToLength":  # Kaldi's old format: a map we do not need
        _read_node(r)
        r.expect("ToPdf")
    tree = _read_node(r)
    r.expect("EndContextDependency")
    if tree is None:
        raise r.fail("an empty tree")
    return tree, width, central


def read_tree(path: str | os.PathLike) -> tuple[Node, int, int]:
    """(tree, context width, central position) from a binary Kaldi `tree` file."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            if f.read(2) != BINARY_MARK:
                raise InputError(f"{path}: not a binary Kaldi tree (no \\0B mark); write it with --binary=true")
            return read_tree_stream(f, str(path))
    except FileNotFoundError:
        raise InputError(f"{path}: no such tree file; build the tree first") from None


def load_context_dependency(path: str | os.PathLike) -> khg.ContextDependency:
    """A binary Kaldi `tree` file as kaldi_hmm_gmm's ContextDependency."""
    verify(path, "decision tree")
    return context_dependency(*read_tree(path))


def read_roots(path: str | os.PathLike, phone_ids: dict[str, int] | None = None) -> list[list[int]]:
    """Kaldi's roots file (`phones/roots.int`, or `phones/roots.txt` given the phone ids):
    `shared split <phone> ...` a line, one root per line. Only `shared split` roots are built
    here (what prepare_lang.sh writes for every phone)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InputError(f"{path}: no such roots file; prepare the lang dir first") from None
    roots = []
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if not fields:
            continue
        if fields[:2] != ["shared", "split"] or len(fields) < 3:
            raise InputError(f"{path}:{number}: expected 'shared split <phones>', got {line!r}")
        try:
            phones = [phone_ids[f] if phone_ids is not None else int(f) for f in fields[2:]]
        except (KeyError, ValueError) as err:
            raise InputError(f"{path}:{number}: unknown phone {err}; is this roots.txt with phones.txt?") from None
        if min(phones) <= 0 or len(set(phones)) != len(phones):
            raise InputError(f"{path}:{number}: phone ids must be positive and distinct")
        roots.append(sorted(phones))
    if not roots:
        raise InputError(f"{path}: empty roots file")
    return roots


# ---- tree statistics in Kaldi's format ----------------------------------------------------


def kaldi_event(row: np.ndarray, context_width: int) -> tuple[tuple[int, int], ...]:
    """An event row (phones at positions 0..N-1, -1 where not recorded, then the pdf-class) as
    Kaldi's EventType: (key, value) pairs sorted by key."""
    pairs = [(PDF_CLASS, int(row[context_width]))]
    pairs += [(k, int(row[k])) for k in range(context_width) if row[k] >= 0]
    return tuple(pairs)


def write_kaldi_tree_stats(path, events, counts, sums, sumsq, var_floor: float, context_width: int) -> None:
    """Kaldi's binary tree statistics (`treeacc`, what acc-tree-stats writes and build-tree,
    sum-tree-stats and cluster-phones read), atomically: `BTS`, the uint32 count, then per
    event `EV`, its pairs, `T` and a GaussClusterable (`GCL`, float count, float variance floor,
    a 2 x D double matrix of sums and sums of squares); events in Kaldi's (std::map) order."""
    order = sorted(range(len(counts)), key=lambda i: kaldi_event(events[i], context_width))
    out = io.BytesIO()
    _token(out, "BTS")
    out.write(struct.pack("<bI", -4, len(order)))
    floor = struct.pack("<bf", 4, var_floor)
    for i in order:
        pairs = kaldi_event(events[i], context_width)
        _token(out, "EV")
        out.write(struct.pack("<bI", -4, len(pairs)))
        for key, value in pairs:
            out.write(struct.pack("<bibi", 4, key, 4, value))
        out.write(b"T")
        _token(out, "GCL")
        out.write(struct.pack("<bf", 4, counts[i]) + floor)
        _token(out, "DM")
        out.write(struct.pack("<bibi", 4, 2, 4, sums.shape[1]))
        out.write(np.concatenate([sums[i], sumsq[i]]).astype("<f8").tobytes())
    with atomic_open(path, "wb") as f:
        f.write(BINARY_MARK + out.getvalue())


def read_kaldi_tree_stats(path, context_width: int = 3):
    """(events, counts, sums, sumsq, var_floor) from Kaldi's binary tree statistics."""
    path = Path(path)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise InputError(f"{path}: no such tree statistics file; run acc-tree-stats first") from None
    with f:
        if f.read(2) != BINARY_MARK:
            raise InputError(f"{path}: not binary Kaldi tree statistics (no \\0B mark)")
        r = KaldiBinaryReader(f, str(path), "tree statistics file")
        r.expect("BTS")
        size = _uint32(r)
        events = np.full((size, context_width + 1), -1, np.int32)
        counts, var_floor, rows = np.zeros(size), VAR_FLOOR, []
        for i in range(size):
            r.expect("EV")
            for _ in range(_uint32(r)):
                key, value = r.int32(), r.int32()
                if not PDF_CLASS <= key < context_width:
                    raise r.fail(f"event key {key} outside a window of {context_width}")
                events[i, context_width if key == PDF_CLASS else key] = value
            if r.read(1) != b"T":
                raise r.fail("an event without statistics")
            r.expect("GCL")
            counts[i], var_floor = r.float32(), r.float32()
            matrix = r.matrix()
            if matrix.shape[0] != 2 or (rows and matrix.shape[1] != rows[0].shape[1]):
                raise r.fail(f"statistics of shape {matrix.shape}")
            rows.append(matrix)
    stacked = np.stack(rows) if rows else np.zeros((0, 2, 0))
    return events, counts, stacked[:, 0], stacked[:, 1], var_floor


def _uint32(r: KaldiBinaryReader) -> int:
    size_byte, value = struct.unpack("<bI", r.read(5))
    if size_byte != -4:
        raise r.fail("expected a uint32")
    return value
