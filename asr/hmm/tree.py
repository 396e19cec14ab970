"""Decision-tree clustering of context-dependent HMM states, as Kaldi's tree tools do it.

kaldi_hmm_gmm binds Kaldi's trees (ContextDependency, event maps) but not the tools that build
one; this module is those tools, following Kaldi's sources (src/tree/, src/hmm/tree-accu.cc):

  `TreeStatsAccumulator` / `accumulate_tree_stats`   acc-tree-stats
      per *event* (the phones in a window of N=3 around the central phone P=1, 0 past the
      utterance's edges, and the frame's pdf-class) the count, sum and sum of squares of the
      features, as `TreeStats` (mergeable across jobs with `merge`);
  `cluster_phones`                                   cluster-phones
      sets of phones for questions, from top-down binary k-means of the phones' statistics
      (pdf-class 1 by default) by Gaussian likelihood: every node of that binary tree but the
      root is a set;
  `compile_questions`                                compile-questions
      the phone sets (plus Kaldi's extra questions, e.g. silence / non-silence) asked of every
      context position, and {0}, {0,1}, ... asked of the pdf-class;
  `build_tree`                                       build-tree
      one root per phone set of the roots file (`shared split`: all the phone's pdf-classes
      under one root), split greedily by the largest gain in the log-likelihood of one diagonal
      Gaussian per leaf (Kaldi's GaussClusterable, variance floor 0.01) while the best gain
      exceeds `thresh` and there are fewer than `num_leaves` leaves; then leaves within a root
      whose merging costs at most `cluster_thresh` are merged, the count rounded down to a
      multiple of 8 as Kaldi's default does, and leaves numbered as Kaldi numbers pdf ids
      (in the order of their leaf numbers at splitting time);
  `pdf_gaussians`                                    gmm-init-model's start
      one Gaussian per pdf from the stats of the events the tree maps to it.

The objective of a set of frames is Kaldi's GaussClusterable::Objf: count times the average
log-likelihood of the frames under their own diagonal Gaussian (variances floored). Splits
never lower it; merges never raise it.
"""

from __future__ import annotations

import heapq
import logging
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import kaldi_hmm_gmm as khg
import numpy as np

from asr.kaldi.tree import (
    PDF_CLASS,
    VAR_FLOOR,
    Constant,
    Node,
    Split,
    Table,
    context_dependency,
    leaf_answers,
    map_answers,
    read_kaldi_tree_stats,
    write_kaldi_tree_stats,
)
from asr.utils.atomic import atomic_open
from asr.utils.errors import InputError

log = logging.getLogger("asr.hmm.tree")

LOG_2PI = math.log(2 * math.pi)
STATS_FLUSH_ROWS = 200_000  # per-utterance event rows buffered before they are merged into the table


# ---- the Gaussian objective ---------------------------------------------------------------


def gauss_objf(stats: np.ndarray, var_floor: float = VAR_FLOOR) -> np.ndarray:
    """Kaldi's GaussClusterable::Objf for rows of packed stats `[n_events, count, sum(D), sumsq(D)]`
    (any leading shape): count * average log-likelihood under the rows' own diagonal Gaussian."""
    dim = (stats.shape[-1] - 2) // 2
    count = stats[..., 1]
    safe = np.where(count > 0, count, 1.0)[..., None]
    mean = stats[..., 2 : 2 + dim] / safe
    var = stats[..., 2 + dim :] / safe - mean * mean
    floored = np.maximum(var, var_floor)
    per_frame = -0.5 * (var / floored).sum(-1) - 0.5 * (np.log(floored).sum(-1) + dim * LOG_2PI)
    return np.where(count > 0, per_frame * count, 0.0)


def kaldi_float_change(objf_a, objf_b, objf_whole) -> np.ndarray:
    """objf_a + objf_b - objf_whole as Kaldi computes it, in BaseFloat (float32): the gain of a
    split or the cost of a merge. Decisions use it so that near ties go as in Kaldi."""
    f32 = np.float32
    return (np.asarray(objf_a).astype(f32) + np.asarray(objf_b).astype(f32)) - np.asarray(objf_whole).astype(f32)


# ---- statistics (acc-tree-stats) ----------------------------------------------------------


@dataclass
class TreeStats:
    """Kaldi's tree statistics (BuildTreeStatsType) as arrays, one row per distinct event.

    `events[:, :N]` are the phones at context positions 0..N-1 (0: past the utterance's edge;
    -1: not recorded, the context of a context-independent central phone, which no question
    may ask), `events[:, N]` the pdf-class. Rows are sorted by event."""

    events: np.ndarray  # (E, N + 1) int32
    counts: np.ndarray  # (E,) float64
    sums: np.ndarray  # (E, D) float64
    sumsq: np.ndarray  # (E, D) float64
    context_width: int = 3
    central_position: int = 1
    var_floor: float = VAR_FLOOR

    @property
    def dim(self) -> int:
        return self.sums.shape[1]

    @property
    def num_frames(self) -> float:
        return float(self.counts.sum())

    @cached_property
    def packed(self) -> np.ndarray:
        """(E, 2 + 2D): number of events (1), count, sum, sum of squares: the rows `gauss_objf` takes."""
        return np.concatenate([np.ones((len(self.counts), 1)), self.counts[:, None], self.sums, self.sumsq], axis=1)

    def merge(self, other: "TreeStats") -> "TreeStats":
        """The stats of both (another job's): equal events summed."""
        if (other.context_width, other.central_position, other.dim) != (
            self.context_width,
            self.central_position,
            self.dim,
        ):
            raise InputError(
                "tree stats: cannot merge stats of different context windows or feature dimensions "
                f"({self.context_width},{self.central_position},{self.dim} vs "
                f"{other.context_width},{other.central_position},{other.dim})"
            )
        events, counts, sums, sumsq = _sum_equal_events(
            np.concatenate([self.events, other.events]),
            np.concatenate([self.counts, other.counts]),
            np.concatenate([self.sums, other.sums]),
            np.concatenate([self.sumsq, other.sumsq]),
        )
        return TreeStats(events, counts, sums, sumsq, self.context_width, self.central_position, self.var_floor)

    def save(self, path: str | os.PathLike) -> None:
        """Write the stats as a numpy .npz (atomic)."""
        with atomic_open(path, "wb") as f:
            np.savez(
                f,
                events=self.events,
                counts=self.counts,
                sums=self.sums,
                sumsq=self.sumsq,
                window=np.array([self.context_width, self.central_position]),
                var_floor=np.array(self.var_floor),
            )

    def save_kaldi(self, path: str | os.PathLike) -> None:
        """Write Kaldi's binary `treeacc` (what acc-tree-stats writes), atomically."""
        write_kaldi_tree_stats(
            path, self.events, self.counts, self.sums, self.sumsq, self.var_floor, self.context_width
        )

    @classmethod
    def load_kaldi(cls, path: str | os.PathLike, context_width: int = 3, central_position: int = 1) -> "TreeStats":
        """Kaldi's binary `treeacc` (acc-tree-stats or sum-tree-stats output)."""
        events, counts, sums, sumsq, var_floor = read_kaldi_tree_stats(path, context_width)
        if (events[:, central_position] < 0).any():
            raise InputError(f"{path}: events without the central phone; is the context window {context_width}?")
        events, counts, sums, sumsq = _sum_equal_events(events, counts, sums, sumsq)
        return cls(events, counts, sums, sumsq, context_width, central_position, var_floor)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "TreeStats":
        path = Path(path)
        try:
            with np.load(path) as z:
                width, central = (int(v) for v in z["window"])
                return cls(z["events"], z["counts"], z["sums"], z["sumsq"], width, central, float(z["var_floor"]))
        except FileNotFoundError:
            raise InputError(f"{path}: no such tree stats file; accumulate them first") from None
        except (KeyError, ValueError, OSError) as err:
            raise InputError(f"{path}: not a tree stats file ({err}); accumulate them again") from None


def sum_by_label(labels: np.ndarray, rows: np.ndarray, num_labels: int) -> np.ndarray:
    """(num_labels, width): the rows summed per label (labels 0..num_labels-1)."""
    width = rows.shape[1]
    index = (labels.astype(np.int64)[:, None] * width + np.arange(width)).ravel()
    return np.bincount(index, weights=rows.ravel(), minlength=num_labels * width).reshape(num_labels, width)


def _event_codes(events: np.ndarray) -> np.ndarray:
    """One int64 per event row, ordered as the rows are lexicographically (values from -1 up)."""
    base = int(events.max(initial=0)) + 2
    if base ** events.shape[1] >= 2**62:
        raise InputError(f"tree stats: phone ids up to {base - 2} are too large to encode {events.shape[1]} of them")
    codes = np.zeros(len(events), dtype=np.int64)
    for column in events.T:
        codes = codes * base + (column.astype(np.int64) + 1)
    return codes


def _sum_equal_events(events, counts, sums, sumsq):
    """Rows with equal events summed, sorted by event."""
    codes = _event_codes(events)
    order = np.argsort(codes, kind="stable")
    codes = codes[order]
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    return (
        events[order[starts]],
        np.add.reduceat(counts[order], starts),
        np.add.reduceat(sums[order], starts, axis=0),
        np.add.reduceat(sumsq[order], starts, axis=0),
    )


@dataclass
class _TransitionTables:
    """Per transition id (index 0 unused): its phone, pdf-class, whether it leaves the phone
    (IsFinal) and whether its HMM state is the phone's first."""

    phone: np.ndarray
    pdf_class: np.ndarray
    is_final: np.ndarray
    is_entry: np.ndarray

    @classmethod
    def of(cls, trans_model: khg.TransitionModel) -> "_TransitionTables":
        n = trans_model.num_transition_ids + 1
        phone, pdf_class = np.zeros(n, np.int32), np.full(n, -1, np.int32)
        is_final, is_entry = np.zeros(n, bool), np.zeros(n, bool)
        tuples, id2state, topo = trans_model.tuples, trans_model.id2state, trans_model.topo
        for tid in range(1, n):
            p, hmm_state, _, _ = tuples[id2state[tid] - 1].__getstate__()
            state = topo.topology_for_phone(p)[hmm_state]
            self_loop = trans_model.is_self_loop(tid)
            phone[tid] = p
            pdf_class[tid] = state.self_loop_pdf_class if self_loop else state.forward_pdf_class
            is_final[tid] = trans_model.is_final(tid)
            # Kaldi's SplitToPhones checks a phone starts in state 0 only where that state emits
            is_entry[tid] = hmm_state == 0 or topo.topology_for_phone(p)[0].forward_pdf_class == -1
        return cls(phone, pdf_class, is_final, is_entry)


class TreeStatsAccumulator:
    """acc-tree-stats: `add` each utterance's alignment (transition ids per frame) and
    features; `stats()` gives the table. `ci_phones` (Kaldi's --ci-phones, usually the
    silence phones) record no context, so the tree never asks about it."""

    def __init__(
        self,
        trans_model: khg.TransitionModel,
        ci_phones: Iterable[int] = (),
        context_width: int = 3,
        central_position: int = 1,
        var_floor: float = VAR_FLOOR,
    ):
        if not 0 <= central_position < context_width:
            raise InputError(f"tree stats: central position {central_position} outside a window of {context_width}")
        self.tables = _TransitionTables.of(trans_model)
        self.context_width, self.central_position, self.var_floor = context_width, central_position, var_floor
        self.is_ci = np.zeros(int(self.tables.phone.max()) + 1, bool)
        for p in ci_phones:
            if 0 < p < len(self.is_ci):
                self.is_ci[p] = True
        self.num_done = self.num_skipped = 0
        self.dim: int | None = None
        self._parts: list[tuple[np.ndarray, ...]] = []
        self._buffered = 0
        self._table: tuple[np.ndarray, ...] | None = None

    def add(self, alignment: np.ndarray, feats: np.ndarray, key: str = "") -> bool:
        """Accumulate one utterance; False (and a warning, as Kaldi) where the alignment does not
        fit the features or the transition model."""
        alignment = np.asarray(alignment)
        if len(alignment) != len(feats) or len(alignment) == 0:
            log.warning(
                "tree stats: %s: alignment has %d frames, features %d; skipped", key, len(alignment), len(feats)
            )
            self.num_skipped += 1
            return False
        if self.dim is None:
            self.dim = feats.shape[1]
        elif feats.shape[1] != self.dim:
            raise InputError(f"tree stats: {key}: features of dimension {feats.shape[1]}, earlier {self.dim}")
        events = self._frame_events(alignment, key)
        if events is None:
            self.num_skipped += 1
            return False
        self._add_frames(events, np.asarray(feats, dtype=np.float64))
        self.num_done += 1
        return True

    def _frame_events(self, alignment: np.ndarray, key: str) -> np.ndarray | None:
        """(T, N + 1) events of the frames: the phone window of each frame's phone and its pdf-class."""
        t = self.tables
        if alignment.min() < 1 or alignment.max() >= len(t.phone):
            log.warning("tree stats: %s: transition ids outside 1..%d; skipped", key, len(t.phone) - 1)
            return None
        phone, final = t.phone[alignment], t.is_final[alignment]
        starts = np.r_[True, final[:-1]]
        segment = np.cumsum(starts) - 1
        segment_phone = phone[starts]
        if not final[-1] or (phone != segment_phone[segment]).any() or not t.is_entry[alignment[starts]].all():
            log.warning("tree stats: %s: alignment does not split into whole phones; skipped", key)
            return None
        n, p = self.context_width, self.central_position
        padded = np.concatenate([np.zeros(p, np.int32), segment_phone, np.zeros(n - 1 - p, np.int32)])
        windows = np.lib.stride_tricks.sliding_window_view(padded, n).copy()  # (segments, N)
        ci = self.is_ci[segment_phone]
        windows[ci] = np.where(np.arange(n) == p, windows[ci], -1)
        return np.concatenate([windows[segment], t.pdf_class[alignment][:, None]], axis=1)

    def _add_frames(self, events: np.ndarray, feats: np.ndarray) -> None:
        # Frames come in runs of one event (an HMM state's frames), so sum the runs first (no
        # copy of the features), then the runs with equal events.
        change = np.r_[True, (events[1:] != events[:-1]).any(axis=1)]
        runs = np.flatnonzero(change)
        counts = np.diff(np.r_[runs, len(events)]).astype(np.float64)
        part = _sum_equal_events(
            events[runs], counts, np.add.reduceat(feats, runs, axis=0), np.add.reduceat(feats * feats, runs, axis=0)
        )
        self._parts.append(part)
        self._buffered += len(part[0])
        if self._buffered >= STATS_FLUSH_ROWS:
            self._flush()

    def _flush(self) -> None:
        parts = self._parts + ([self._table] if self._table is not None else [])
        if parts:
            self._table = _sum_equal_events(*(np.concatenate(columns) for columns in zip(*parts)))
        self._parts, self._buffered = [], 0

    def stats(self) -> TreeStats:
        self._flush()
        if self._table is None:
            raise InputError("tree stats: no utterance was accumulated (alignments and features do not match?)")
        events, counts, sums, sumsq = self._table
        return TreeStats(events, counts, sums, sumsq, self.context_width, self.central_position, self.var_floor)


def accumulate_tree_stats(
    trans_model: khg.TransitionModel,
    utterances: Iterable[tuple[np.ndarray, np.ndarray]],
    ci_phones: Iterable[int] = (),
    context_width: int = 3,
    central_position: int = 1,
) -> TreeStats:
    """acc-tree-stats over (alignment, features) pairs."""
    acc = TreeStatsAccumulator(trans_model, ci_phones, context_width, central_position)
    for alignment, feats in utterances:
        acc.add(alignment, feats)
    return acc.stats()


def stats_by_value(
    stats: TreeStats, column: int, values: Sequence[int], pdf_classes: Sequence[int] | None = None
) -> np.ndarray:
    """Packed stats (len(values), 2 + 2D) summed per value of an event column (optionally only
    rows whose pdf-class is in `pdf_classes`)."""
    keep = np.ones(len(stats.counts), bool)
    if pdf_classes is not None:
        keep = np.isin(stats.events[:, stats.context_width], pdf_classes)
    packed = stats.packed[keep]
    column_values = stats.events[keep, column]
    out = np.zeros((len(values), packed.shape[1]))
    for i, value in enumerate(values):
        out[i] = packed[column_values == value].sum(axis=0)
    return out


# ---- questions (cluster-phones, compile-questions) ----------------------------------------


def _refine_two(points: np.ndarray, assign: np.ndarray, var_floor: float, max_iters: int = 100) -> None:
    """Kaldi's RefineClusters for two clusters: move single points to the other cluster while
    that raises the objective (in place)."""
    clusters = np.stack([points[assign == c].sum(axis=0) for c in (0, 1)])
    for _ in range(max_iters):
        moved = False
        for i in range(len(points)):
            a = assign[i]
            before = gauss_objf(clusters, var_floor).sum()
            trial = clusters.copy()
            trial[a] -= points[i]
            trial[1 - a] += points[i]
            if gauss_objf(trial, var_floor).sum() > before + 1e-9 * abs(before):
                clusters, assign[i], moved = trial, 1 - a, True
        if not moved:
            return


def _two_means(
    points: np.ndarray, rng: np.random.Generator, var_floor: float, tries: int = 10
) -> tuple[float, np.ndarray]:
    """Kaldi's ClusterKMeans with k=2 and 10 tries (AutomaticallyObtainQuestions' setting):
    the best (gain over one cluster, assignment)."""
    n = len(points)
    whole = float(gauss_objf(points.sum(axis=0), var_floor))
    best_gain, best = -math.inf, np.zeros(n, np.int64)
    for _ in range(tries):
        skip = 1 if n == 1 else int(rng.integers(1, n))
        while math.gcd(skip, n) != 1:  # a stride through the points that visits each once
            skip = skip % (n - 1) + 1
        assign = np.zeros(n, np.int64)
        assign[(np.arange(n) * skip) % n] = np.arange(n) % 2
        _refine_two(points, assign, var_floor)
        gain = float(gauss_objf(np.stack([points[assign == c].sum(axis=0) for c in (0, 1)]), var_floor).sum()) - whole
        if gain > best_gain:
            best_gain, best = gain, assign.copy()
    return best_gain, best


def cluster_phones(
    stats: TreeStats, phone_sets: Sequence[Sequence[int]], pdf_classes: Sequence[int] = (1,), seed: int = 0
) -> list[list[int]]:
    """cluster-phones (Kaldi's AutomaticallyObtainQuestions): the phone sets' central-phone
    stats (pdf-classes `pdf_classes`) split top-down by binary k-means, always splitting the
    cluster whose split gains most, until every set stands alone; every cluster of that tree
    but the root is a question, then the input sets themselves, without duplicates (the sets
    Kaldi's cluster-phones writes, in another order)."""
    sets = [sorted(int(p) for p in s) for s in phone_sets]
    flat = [p for s in sets for p in s]
    if not sets or any(not s for s in sets) or len(flat) != len(set(flat)):
        raise InputError("cluster_phones: phone sets must be non-empty and each phone in one set")
    per_phone = stats_by_value(stats, stats.central_position, flat, pdf_classes)
    ends = np.cumsum([len(s) for s in sets])
    points = np.add.reduceat(per_phone, np.r_[0, ends[:-1]], axis=0)
    if (points[:, 1] == 0).sum() + 1 >= len(sets):
        log.warning(
            "cluster_phones: all or all but one phone sets have no stats with pdf-class in %s", list(pdf_classes)
        )
    rng = np.random.default_rng(seed)
    clusters: list[list[int]] = [list(range(len(sets)))]  # members (set indices) of every node, in creation order
    queue: list[tuple[float, int, np.ndarray]] = []

    def consider(node: int) -> None:
        members = clusters[node]
        if len(members) > 1:
            gain, assign = _two_means(points[members], rng, stats.var_floor)
            if gain > 0:
                heapq.heappush(queue, (-gain, node, assign))

    consider(0)
    leaves = 1
    while queue and leaves < len(sets):
        _, node, assign = heapq.heappop(queue)
        members = np.array(clusters[node])
        for side in (0, 1):
            clusters.append(members[assign == side].tolist())
            consider(len(clusters) - 1)
        leaves += 1
    out: list[list[int]] = []
    # The root (every phone) is left out: Kaldi's ObtainSetsOfPhones never fills it in
    for members in clusters[1:] + [[i] for i in range(len(sets))]:
        phones = sorted(p for i in members for p in sets[i])
        if phones and phones not in out:
            out.append(phones)
    return out


@dataclass(frozen=True)
class Questions:
    """What the tree may ask (Kaldi's compiled questions, `questions.qst`): each phone set of
    every context position, each pdf-class set of the pdf-class. Sorted, without duplicates."""

    phone_sets: tuple[tuple[int, ...], ...]
    pdf_class_sets: tuple[tuple[int, ...], ...]

    def of_key(self, key: int) -> tuple[tuple[int, ...], ...]:
        return self.pdf_class_sets if key == PDF_CLASS else self.phone_sets


def compile_questions(phone_sets: Iterable[Iterable[int]], max_num_pdf_classes: int) -> Questions:
    """compile-questions: the phone sets (sorted, duplicates dropped) for every context
    position; {0}, {0,1}, ..., {0..max-2} for the pdf-class."""
    unique = sorted({tuple(sorted(set(int(p) for p in s))) for s in phone_sets} - {()})
    pdf_sets = tuple(tuple(range(i + 1)) for i in range(max_num_pdf_classes - 1))
    return Questions(tuple(unique), pdf_sets)


def kaldi_questions(
    stats: TreeStats,
    topo: khg.HmmTopology,
    silence_phones: Sequence[int],
    nonsilence_phones: Sequence[int],
    phone_sets: Sequence[Sequence[int]] | None = None,
    seed: int = 0,
) -> Questions:
    """The questions of Kaldi's train_deltas.sh: cluster-phones on `phone_sets` (default: each
    phone alone, as phones/sets.txt without word positions) plus the extra questions
    silence / non-silence, compiled against the topology."""
    sets = phone_sets if phone_sets is not None else [[p] for p in [*silence_phones, *nonsilence_phones]]
    clustered = cluster_phones(stats, sets, seed=seed)
    max_classes = max(topo.num_pdf_classes(p) for p in topo.phones)
    return compile_questions([*clustered, list(silence_phones), list(nonsilence_phones)], max_classes)


# ---- building (build-tree) ----------------------------------------------------------------


@dataclass(frozen=True)
class TreeSplit:
    """One split, in the order they were made: the leaf split (its number while building),
    the key asked, the yes set, the objective gain and the frames on each side."""

    leaf: int
    key: int
    yes_set: tuple[int, ...]
    gain: float
    yes_count: float
    no_count: float
    kaldi_gain: float  # the gain as Kaldi's float arithmetic has it (what ordered the splits)


@dataclass
class BuiltTree:
    """What build_tree returns. `tree` maps events to pdf ids 0..num_pdfs-1; `objf` is the
    objective of the stats under it (before: `objf_roots` under one Gaussian per root)."""

    tree: Node
    ctx_dep: khg.ContextDependency
    num_pdfs: int
    objf_roots: float
    split_gain: float  # Kaldi's like-impr: the sum of the splits' gains
    cluster_change: float  # the objective's change from merging leaves (<= 0)
    objf: float
    splits: list[TreeSplit] = field(default_factory=list)
    context_width: int = 3
    central_position: int = 1


def stub_tree(roots: Sequence[Sequence[int]], central_position: int = 1) -> Node:
    """Kaldi's GetStubMap for `shared split` roots: one leaf per root (numbered in the roots'
    order), found by a table on the central phone (or halving splits where roots share phones)."""
    sets = [tuple(sorted(int(p) for p in s)) for s in roots]
    flat = [p for s in sets for p in s]
    if not sets or any(not s for s in sets) or len(flat) != len(set(flat)) or min(flat) < 1:
        raise InputError("roots: each root needs phones (ids > 0), and each phone one root")
    counter = iter(range(len(sets)))

    def stub(part: list[tuple[int, ...]]) -> Node:
        if len(part) == 1:
            return Constant(next(counter))
        highest = max(p for s in part for p in s)
        if max(len(s) for s in part) == 1 and len(part) <= 2 * highest:
            table: list[Node | None] = [None] * (highest + 1)
            for s in part:
                table[s[0]] = Constant(next(counter))
            return Table(central_position, tuple(table))
        half = len(part) // 2
        first, second = stub(part[:half]), stub(part[half:])
        return Split(central_position, tuple(sorted(p for s in part[:half] for p in s)), first, second)

    return stub(sets)


def event_leaves(tree: Node, events: np.ndarray, context_width: int) -> np.ndarray:
    """The answer for every event row (vectorised Kaldi Map); -1 where the tree has none."""
    out = np.full(len(events), -1, np.int64)

    def column(key: int) -> int:
        return context_width if key == PDF_CLASS else key

    def walk(node: Node | None, rows: np.ndarray) -> None:
        if node is None or len(rows) == 0:
            return
        if isinstance(node, Constant):
            out[rows] = node.answer
            return
        values = events[rows, column(node.key)]
        if isinstance(node, Table):
            for value, child in enumerate(node.table):
                walk(child, rows[values == value])
            return
        known = values >= 0
        yes = np.isin(values, node.yes_set)
        walk(node.yes, rows[yes & known])
        walk(node.no, rows[~yes & known])

    walk(tree, np.arange(len(events)))
    return out


def objf_given_tree(stats: TreeStats, tree: Node) -> float:
    """Kaldi's ObjfGivenMap: the objective with one Gaussian per leaf of the tree."""
    leaves = event_leaves(tree, stats.events, stats.context_width)
    if (leaves < 0).any():
        raise InputError("tree: some events of the stats have no leaf in the tree")
    _, inverse = np.unique(leaves, return_inverse=True)
    summed = sum_by_label(inverse, stats.packed, int(inverse.max()) + 1)
    return float(gauss_objf(summed, stats.var_floor).sum())


def pdf_gaussians(stats: TreeStats, tree: Node, num_pdfs: int, var_floor: float = VAR_FLOOR):
    """gmm-init-model's single Gaussian per pdf from the tree stats: (counts (P,), means (P, D),
    variances (P, D), floored at var_floor); a pdf without stats gets the global one, as Kaldi."""
    leaves = event_leaves(tree, stats.events, stats.context_width)
    if (leaves < 0).any() or leaves.max(initial=0) >= num_pdfs:
        raise InputError("tree: the stats' events do not all map to pdfs 0..num_pdfs-1 of the tree")
    summed = sum_by_label(leaves, stats.packed, num_pdfs)
    empty = summed[:, 1] <= 0
    summed[empty] = stats.packed.sum(axis=0)
    if empty.any():
        log.warning("pdf_gaussians: %d pdfs have no stats (phones unseen in training?)", int(empty.sum()))
    dim = stats.dim
    counts = summed[:, 1]
    means = summed[:, 2 : 2 + dim] / counts[:, None]
    variances = np.maximum(summed[:, 2 + dim :] / counts[:, None] - means * means, var_floor)
    return counts, means, variances


class _Splitter:
    """The greedy splitting of Kaldi's SplitDecisionTree over all leaves at once: every leaf
    knows its best question; the leaf with the largest gain is split next."""

    def __init__(self, stats: TreeStats, questions: Questions, min_count: float):
        self.stats, self.min_count = stats, min_count
        self.packed = stats.packed
        self.width = self.packed.shape[1]
        n = stats.context_width
        self.keys = [PDF_CLASS, *range(n)]  # Kaldi's order (a std::map): ties go to the first
        self.columns = {key: (n if key == PDF_CLASS else key) for key in self.keys}
        self.yes_matrix, self.no_matrix = {}, {}
        for key in self.keys:
            sets = questions.of_key(key)
            if not sets:
                continue
            size = max(int(stats.events[:, self.columns[key]].max(initial=0)), max(max(s) for s in sets)) + 1
            yes = np.zeros((len(sets), size))
            for i, s in enumerate(sets):
                yes[i, list(s)] = 1.0
            self.yes_matrix[key], self.no_matrix[key] = yes, 1.0 - yes

    @staticmethod
    def _first_of_each_partition(yes_matrix: np.ndarray, by_value: np.ndarray) -> np.ndarray:
        """Which questions are the first to split the values present here their way. Questions
        differing only in absent values split alike; Kaldi takes the first of them (their gains
        are bitwise equal there), while a matrix product may round them apart."""
        patterns = yes_matrix[:, by_value[:, 0] > 0]
        _, first = np.unique(patterns, axis=0, return_index=True)
        keep = np.zeros(len(yes_matrix), bool)
        keep[first] = True
        return keep

    def best_split(self, rows: np.ndarray) -> _Candidate:
        """The best question for these rows (gain 0 if none)."""
        best = _Candidate(0.0, np.float32(0.0), 0, -1, np.zeros(len(rows), bool))
        if len(rows) <= 1:
            return best
        packed = self.packed[rows]
        base = gauss_objf(packed.sum(axis=0), self.stats.var_floor)
        for key, yes_matrix in self.yes_matrix.items():
            values = self.stats.events[rows, self.columns[key]]
            if values.min() < 0:  # the key is not recorded for every event here (a CI phone)
                continue
            by_value = sum_by_label(values, packed, yes_matrix.shape[1])
            yes, no = yes_matrix @ by_value, self.no_matrix[key] @ by_value
            objf_yes, objf_no = gauss_objf(yes, self.stats.var_floor), gauss_objf(no, self.stats.var_floor)
            usable = (yes[:, 0] > 0.5) & (no[:, 0] > 0.5) & self._first_of_each_partition(yes_matrix, by_value)
            if self.min_count > 0:
                usable &= (yes[:, 1] >= self.min_count) & (no[:, 1] >= self.min_count)
            gain = np.where(usable, kaldi_float_change(objf_no, objf_yes, base), np.float32(0.0))
            q = int(np.argmax(gain))  # the first of equal gains, as Kaldi
            if gain[q] > best.gain32:
                exact = float(objf_yes[q] + objf_no[q] - base)
                best = _Candidate(exact, gain[q], key, q, yes_matrix[q, values] > 0.5)
        return best


@dataclass
class _Candidate:
    """A leaf's best split: its gain (double, and as Kaldi's float, which decides), the key,
    the question's index and which of the leaf's rows answer yes."""

    gain: float
    gain32: np.float32
    key: int
    question: int
    answer: np.ndarray


def _leaf_tree(node_kind: dict, node: tuple) -> Node:
    kind = node_kind[node]
    if kind[0] == "leaf":
        return Constant(kind[1])
    _, key, yes_set, yes, no = kind
    return Split(key, yes_set, _leaf_tree(node_kind, yes), _leaf_tree(node_kind, no))


def _split_tree(stats, questions, root_of_event, num_roots, thresh, max_leaves, min_count):
    """SplitDecisionTree: (subtree per root with leaf numbers, the splits in order). The leaf
    with the largest gain is split next; of equal (float) gains, the one of the last root, and
    within a root the first in pre-order (yes before no), as Kaldi's queue of roots does."""
    splitter = _Splitter(stats, questions, min_count)
    node_kind: dict[tuple, tuple] = {}
    rows_of: dict[int, np.ndarray] = {}
    heap: list[tuple] = []
    candidates: dict[tuple, _Candidate] = {}

    def open_leaf(node: tuple, leaf: int, rows: np.ndarray) -> None:
        node_kind[node], rows_of[leaf] = ("leaf", leaf), rows
        candidates[node] = splitter.best_split(rows)
        if candidates[node].gain32 > 0:
            heapq.heappush(heap, (-candidates[node].gain32, -node[0], node[1:], leaf))

    order = np.argsort(root_of_event, kind="stable")
    bounds = np.searchsorted(root_of_event[order], np.arange(num_roots + 1))
    for root in range(num_roots):
        open_leaf((root,), root, order[bounds[root] : bounds[root + 1]])
    num_leaves, splits = num_roots, []
    while heap and -heap[0][0] > np.float32(thresh) and (max_leaves <= 0 or num_leaves < max_leaves):
        _, minus_root, path, leaf = heapq.heappop(heap)
        node = (-minus_root, *path)
        best = candidates.pop(node)
        yes_rows, no_rows = rows_of[leaf][best.answer], rows_of[leaf][~best.answer]
        yes_set = questions.of_key(best.key)[best.question]
        node_kind[node] = ("split", best.key, yes_set, (*node, 0), (*node, 1))
        yes_count, no_count = float(stats.counts[yes_rows].sum()), float(stats.counts[no_rows].sum())
        splits.append(TreeSplit(leaf, best.key, yes_set, best.gain, yes_count, no_count, float(best.gain32)))
        open_leaf((*node, 0), leaf, yes_rows)  # as Kaldi: the yes side keeps the leaf's number
        open_leaf((*node, 1), num_leaves, no_rows)
        num_leaves += 1
    subtrees = [_leaf_tree(node_kind, (root,)) for root in range(num_roots)]
    return subtrees, splits


class _Compartment:
    """One compartment of bottom-up clustering (Kaldi's BottomUpClusterer): its points' stats,
    the cost of merging each pair (i, j < i; inf once either is gone) and who merged into whom."""

    def __init__(self, points: np.ndarray, var_floor: float):
        self.points, self.var_floor = points, var_floor
        self.objf = gauss_objf(points, var_floor)
        n = len(points)
        self.cost = np.full((n, n), np.inf)
        for i in range(1, n):  # row by row: a whole n x n x width block would not fit at scale
            self.cost[i, :i] = self._costs(i, np.arange(i))
        self.parent = np.arange(n)
        self.alive = np.ones(n, bool)

    def _costs(self, i: int, others: np.ndarray) -> np.ndarray:
        """Kaldi's Distance (in float, never below 0) of point i to each of `others`."""
        merged = gauss_objf(self.points[i] + self.points[others], self.var_floor)
        return np.maximum(kaldi_float_change(self.objf[i], self.objf[others], merged), 0).astype(np.float64)

    def cheapest(self) -> float:
        return float(self.cost.min(initial=np.inf))

    def merge_cheapest(self) -> float:
        """Merge the cheapest pair, j into i (i > j, as Kaldi); returns its cost."""
        i, j = np.unravel_index(np.argmin(self.cost), self.cost.shape)
        cost = float(self.cost[i, j])
        self.points[i] += self.points[j]
        self.objf[i] = gauss_objf(self.points[i], self.var_floor)
        self.parent[j], self.alive[j] = i, False
        self.cost[j, :] = self.cost[:, j] = np.inf
        index = np.arange(len(self.points))
        below, above = np.flatnonzero(self.alive & (index < i)), np.flatnonzero(self.alive & (index > i))
        self.cost[i, below] = self._costs(i, below)
        self.cost[above, i] = self._costs(i, above)
        return cost

    def clusters(self) -> np.ndarray:
        """Each point's cluster number, clusters numbered in the order of their surviving point."""
        root = self.parent.copy()
        while (root != root[root]).any():
            root = root[root]
        return np.searchsorted(np.flatnonzero(self.alive), root)


def _merge_leaves(
    groups: list[list[int]], leaf_stats: dict[int, np.ndarray], max_cost: float, min_total: int, var_floor
):
    """Kaldi's bottom-up clustering within compartments (ClusterBottomUp per compartment, or
    ClusterBottomUpCompartmentalized down to `min_total` clusters): merge the cheapest pair of
    any compartment while its cost (the objective's loss) is at most `max_cost`. Returns
    leaf -> the leaf number it takes."""
    compartments = [_Compartment(np.stack([leaf_stats[leaf] for leaf in g]), var_floor) for g in groups]
    cheapest = np.array([c.cheapest() for c in compartments])
    total = sum(len(g) for g in groups)
    while total > min_total and len(cheapest) and cheapest.min() <= np.float32(max_cost):
        which = int(np.argmin(cheapest))
        compartments[which].merge_cheapest()
        cheapest[which] = compartments[which].cheapest()
        total -= 1
    mapping = {}
    for leaves, compartment in zip(groups, compartments):
        for leaf, cluster in zip(leaves, compartment.clusters()):
            mapping[leaf] = leaves[cluster]  # as Kaldi: cluster c takes the group's c-th leaf number
    return mapping


def _cluster_leaves(tree, stats, root_of_event, num_roots, max_cost, total_leaves):
    """The tree with leaves of one root merged (see _merge_leaves) while the whole tree has
    more than `total_leaves` leaves (0: no limit); leaves without stats are never merged."""
    leaves = event_leaves(tree, stats.events, stats.context_width)
    packed = stats.packed
    groups: list[list[int]] = [[] for _ in range(num_roots)]
    leaf_stats: dict[int, np.ndarray] = {}
    order = np.argsort(leaves, kind="stable")
    starts = np.flatnonzero(np.r_[True, leaves[order][1:] != leaves[order][:-1]])
    summed = np.add.reduceat(packed[order], starts, axis=0)
    for start, total in zip(starts, summed):
        leaf = int(leaves[order[start]])
        leaf_stats[leaf] = total
        groups[int(root_of_event[order[start]])].append(leaf)
    without_stats = len(leaf_answers(tree)) - len(leaf_stats)
    min_total = max(total_leaves - without_stats, 0)
    mapping = _merge_leaves([g for g in groups if g], leaf_stats, max_cost, min_total, stats.var_floor)
    return map_answers(tree, mapping)


def build_tree(
    stats: TreeStats,
    roots: Sequence[Sequence[int]],
    questions: Questions,
    num_leaves: int,
    thresh: float = 300.0,
    cluster_thresh: float | None = None,
    round_num_leaves: bool = True,
    min_count: float = 0.0,
) -> BuiltTree:
    """build-tree: a context-dependency tree over `stats` with at most `num_leaves` leaves.

    roots: phone sets, one root each (Kaldi's `shared split`: all pdf-classes of the phones
    under it; the pdf-class is a question like the contexts). thresh: the smallest gain a split
    needs (Kaldi's --thresh). cluster_thresh: merge leaves of one root whose merging costs at
    most this; None = the smallest split's gain (Kaldi's -1), 0 = no merging. round_num_leaves:
    merge the cheapest further leaves down to a multiple of 8 (Kaldi's default). min_count: the
    fewest frames either side of a split may have (not in Kaldi; 0 = Kaldi's behaviour)."""
    if num_leaves < len(roots):
        raise InputError(f"build_tree: num_leaves {num_leaves} is below the number of roots {len(roots)}")
    n, p = stats.context_width, stats.central_position
    stub = stub_tree(roots, p)
    root_of_event = event_leaves(stub, stats.events, n)
    if (root_of_event < 0).any():
        phones = sorted(set(stats.events[root_of_event < 0, p].tolist()))
        raise InputError(f"roots: phones {phones[:10]} have stats but no root; list every phone in the roots")
    root_stats = sum_by_label(root_of_event, stats.packed, len(roots))
    objf_roots = float(gauss_objf(root_stats, stats.var_floor).sum())

    subtrees, splits = _split_tree(stats, questions, root_of_event, len(roots), thresh, num_leaves, min_count)
    tree = map_subtrees(stub, subtrees)
    split_gain = sum(s.gain for s in splits)
    objf_split = objf_given_tree(stats, tree)
    leaves_after_split = len(roots) + len(splits)
    log.info(
        "build_tree: %d splits, %d leaves, gain %.4g per frame",
        len(splits),
        leaves_after_split,
        split_gain / max(stats.num_frames, 1),
    )

    if cluster_thresh is None:
        cluster_thresh = min((s.kaldi_gain for s in splits), default=0.0)
    if cluster_thresh > 0:
        tree = _cluster_leaves(tree, stats, root_of_event, len(roots), cluster_thresh, 0)
    if round_num_leaves:
        leaves_now = len(leaf_answers(tree))
        if 8 <= leaves_now and leaves_now % 8:
            tree = _cluster_leaves(tree, stats, root_of_event, len(roots), math.inf, (leaves_now // 8) * 8)
    tree, num_pdfs = renumber(tree)
    objf = objf_given_tree(stats, tree)
    cluster_change = objf - objf_split
    log.info(
        "build_tree: %d pdfs, objective change from merging %.4g per frame",
        num_pdfs,
        cluster_change / max(stats.num_frames, 1),
    )
    return BuiltTree(
        tree, context_dependency(tree, n, p), num_pdfs, objf_roots, split_gain, cluster_change, objf, splits, n, p
    )


def map_subtrees(stub: Node, subtrees: list[Node]) -> Node:
    """The stub with each root leaf replaced by its subtree (Kaldi's Copy(new_leaves))."""
    if isinstance(stub, Constant):
        return subtrees[stub.answer]
    if isinstance(stub, Table):
        return Table(stub.key, tuple(None if c is None else map_subtrees(c, subtrees) for c in stub.table))
    return Split(stub.key, stub.yes_set, map_subtrees(stub.yes, subtrees), map_subtrees(stub.no, subtrees))


def renumber(tree: Node) -> tuple[Node, int]:
    """Kaldi's RenumberEventMap: answers renumbered 0.. in the order of their old numbers."""
    answers = sorted(leaf_answers(tree))
    return map_answers(tree, {old: new for new, old in enumerate(answers)}), len(answers)
