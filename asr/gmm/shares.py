"""The jobs of GMM training: shares of the utterances, each with its features and training
graphs written once, and the work one job does in a pass (align, accumulate).

Share N (1-based, as Kaldi's JOB) holds consecutive utterances in key order, about equal in
frames. `prepare_share` writes into the work dir `feats.N.npy` (the share's static features,
frames of all its utterances stacked, float32), `utts.N` (`utt frames` a line, in order) and
`fsts.N.ark` (the training graphs, a Kaldi table of FSTs as compile-train-graphs writes
them): every pass then reads a memory map and the graphs instead of decoding compressed
features and compiling again. A pass (`run_share`) aligns (equally, or with the model) or
reads the share's alignments, writes `ali.N.gz` when it aligned, and returns the statistics.
"""

from __future__ import annotations

import logging
import zlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import kaldi_hmm_gmm as khg
import kaldifst
import numpy as np

from asr.features.splice import splice
from asr.gmm.adaptation import MlltAccs, SpeakerAccs, add_lda_frames, mllt_frames_term, speaker_accs
from asr.gmm.frontend import GmmFeatures, Projection
from asr.gmm.graphs import AlignOptions, align, equal_alignment, graph_compiler, silence_transition_ids
from asr.gmm.stats import FrameWeights, ModelArrays, Stats, accumulate
from asr.kaldi.alignments import parse_int_vector_archive, read_archive_bytes, write_int_vector_archive
from asr.utils.atomic import atomic_path, write_text
from asr.utils.errors import InputError

log = logging.getLogger("asr.gmm")


def split_shares(utts: list[str], frames: dict[str, int], nj: int) -> list[list[str]]:
    """At most `nj` runs of consecutive utterances with about equal frames each."""
    nj = max(1, min(nj, len(utts)))
    total = sum(frames[u] for u in utts)
    shares: list[list[str]] = [[] for _ in range(nj)]
    done = 0
    for utt in utts:
        shares[min(nj - 1, int(done * nj / max(total, 1)))].append(utt)
        done += frames[utt]
    return [s for s in shares if s]


@dataclass
class ShareSpec:
    """What a job needs to prepare its share (picklable: it travels to a worker process)."""

    index: int  # 1-based
    work_dir: Path
    utts: list[str]
    texts: dict[str, list[int]]  # word ids
    feats_dir: Path
    utt2spk: dict[str, str]  # the whole set's (speaker CMVN sums over a speaker's utterances)
    front_end: str
    num_ceps: int
    lifter: float
    cmvn: str = "set"
    feats: bool = True  # write the features (False: they are there already)
    graphs: bool = True  # compile the training graphs (False: not yet, no model for them)


def feats_path(work_dir: Path, index: int) -> Path:
    return work_dir / f"feats.{index}.npy"


def prepare_share(spec: ShareSpec, lang, tm: khg.TransitionModel, tree: khg.ContextDependency) -> int:
    """Write the share's features, utterance list and graphs (as asked); returns its frames."""
    frames = (
        write_share_features(spec) if spec.feats else sum(n for _, n in share_utterances(spec.work_dir, spec.index))
    )
    if spec.graphs:
        write_share_graphs(spec, lang, tm, tree)
    return frames


def write_share_features(spec: ShareSpec) -> int:
    source = GmmFeatures(spec.feats_dir, spec.utt2spk, spec.front_end, spec.num_ceps, spec.lifter, spec.cmvn)
    blocks = [source.statics(utt) for utt in spec.utts]
    with atomic_path(feats_path(spec.work_dir, spec.index)) as tmp, open(tmp, "wb") as f:
        np.save(f, np.concatenate(blocks) if blocks else np.zeros((0, source.dim), np.float32))
    write_text(spec.work_dir / f"utts.{spec.index}", "".join(f"{u} {len(b)}\n" for u, b in zip(spec.utts, blocks)))
    return sum(len(b) for b in blocks)


def write_share_graphs(spec: ShareSpec, lang, tm: khg.TransitionModel, tree: khg.ContextDependency) -> None:
    compiler = graph_compiler(lang, tm, tree)
    fsts = spec.work_dir / f"fsts.{spec.index}.ark"
    with atomic_path(fsts) as tmp:
        writer = kaldifst.VectorFstWriter(f"ark:{tmp}")
        for utt in spec.utts:
            writer.write(utt, compiler.compile_graph_from_text(spec.texts[utt]))
        writer.close()


def share_utterances(work_dir: Path, index: int) -> list[tuple[str, int]]:
    lines = (work_dir / f"utts.{index}").read_text().split("\n")
    return [(u, int(n)) for u, n in (line.split() for line in lines if line)]


class ShareFeatures:
    """A share's features as a system sees them (its Projection of the statics), utterance by
    utterance, from the share's memory map."""

    def __init__(self, work_dir: Path, index: int, projection: Projection):
        self.utts = share_utterances(work_dir, index)
        self.statics = np.load(feats_path(work_dir, index), mmap_mode="r")
        self.starts = np.concatenate([[0], np.cumsum([n for _, n in self.utts])])
        self.projection = projection

    def statics_by_utterance(self):
        for (utt, _), start, stop in zip(self.utts, self.starts[:-1], self.starts[1:]):
            yield utt, np.asarray(self.statics[start:stop])

    def both(self):
        """(utt, speaker-independent features, adapted features) in the share's order."""
        for utt, statics in self.statics_by_utterance():
            independent = self.projection.speaker_independent(statics)
            yield utt, independent, self.projection.adapt(utt, independent)

    def __iter__(self):
        for utt, _, adapted in self.both():
            yield utt, adapted


@dataclass
class PassSpec:
    """One pass of one job: how to get its alignments, the model, and what to gather."""

    index: int
    work_dir: Path
    out_dir: Path  # ali.N.gz goes here
    mode: str  # equal | align | read | given (the `alignments` below)
    model: tuple  # (TransitionModel, AmDiagGmm), pickled through the bindings
    projection: Projection
    align_opts: AlignOptions = field(default_factory=AlignOptions)
    accumulate: bool = True
    gather: tuple[str, ...] = ()  # also: mllt | fmllr | twofeats (sums over the unadapted frames)
    silence_phones: tuple[int, ...] = ()  # weighted 0 in the MLLT and fMLLR statistics
    alignments: list | None = None  # mode given: (utt, transition ids) in the share's order


@dataclass
class PassResult:
    stats: Stats | None
    aligned: int = 0
    failed: list[str] = field(default_factory=list)
    retried: int = 0
    align_log_like: float = 0.0  # the aligner's scores (acoustic-scaled), summed
    frames: int = 0
    align_seconds: float = 0.0
    mllt: MlltAccs | None = None
    speakers: dict[str, SpeakerAccs] = field(default_factory=dict)

    def add(self, other: "PassResult") -> None:
        """Sum another job's result into this one (the statistics add)."""
        self.aligned += other.aligned
        self.failed += other.failed
        self.retried += other.retried
        self.frames += other.frames
        self.align_log_like += other.align_log_like
        self.align_seconds = max(self.align_seconds, other.align_seconds)
        for name in ("stats", "mllt"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine is None:
                setattr(self, name, theirs)
            elif theirs is not None:
                mine.add(theirs)
        for speaker, acc in other.speakers.items():
            if speaker in self.speakers:
                self.speakers[speaker].add(acc)
            else:
                self.speakers[speaker] = acc


def ali_path(out_dir: Path, index: int) -> Path:
    return out_dir / f"ali.{index}.gz"


def run_share(spec: PassSpec) -> PassResult:
    """Align (or read the alignments of) one share, write ali.N.gz if aligned, accumulate."""
    tm, am = spec.model
    feats = ShareFeatures(spec.work_dir, spec.index, spec.projection)
    model = ModelArrays.of(am) if spec.accumulate else None
    stats = Stats.zeros(model.num_gauss, am.dim, tm.num_transition_ids) if model else None
    result = PassResult(stats)
    if spec.mode == "read":
        path = ali_path(spec.out_dir, spec.index)
        alignments = parse_int_vector_archive(read_archive_bytes(path), str(path))
    elif spec.mode == "given":
        alignments = spec.alignments or []
    else:
        alignments = list(aligned_utterances(spec, feats, tm, am, result))  # transition ids: 4 bytes a frame
        write_int_vector_archive(ali_path(spec.out_dir, spec.index), iter(alignments))
    gatherer = Gatherer(spec, tm, model, result) if model else None
    batch = FrameBatch()
    for utt, tids, independent, adapted in joined(alignments, feats):
        result.frames += len(tids)
        if gatherer is not None and batch.add(utt, tids, independent, adapted) >= ACCUMULATE_FRAMES:
            gatherer(batch)
    if gatherer is not None and batch.frames:
        gatherer(batch)
    return result


ACCUMULATE_FRAMES = 50_000  # frames accumulated together: one product per pdf for them all (10 MB in float64)


class FrameBatch:
    """Aligned frames of several utterances, gathered so that each pdf's Gaussians are
    evaluated once for all of them rather than once per utterance (8 times faster on the
    mini corpus: 0.2 s instead of 1.7 s for 1,000 utterances)."""

    def __init__(self):
        self.utts: list[tuple[str, int]] = []
        self.tids: list[np.ndarray] = []
        self.independent: list[np.ndarray] = []
        self.adapted: list[np.ndarray] = []
        self.frames = 0

    def add(self, utt: str, tids: np.ndarray, independent: np.ndarray, adapted: np.ndarray) -> int:
        self.utts.append((utt, len(tids)))
        self.tids.append(tids)
        self.independent.append(independent)
        self.adapted.append(adapted)
        self.frames += len(tids)
        return self.frames

    def take(self) -> tuple[list[tuple[str, int]], np.ndarray, np.ndarray, np.ndarray]:
        """(utterances and their frames, transition ids, unadapted and adapted frames) of the
        batch, which starts again empty."""
        out = self.utts, np.concatenate(self.tids), np.concatenate(self.independent), np.concatenate(self.adapted)
        self.__init__()
        return out


class Gatherer:
    """A job's statistics from its batches: the model's EM statistics, and as the pass asks the
    MLLT statistics (non-silence frames) and each speaker's fMLLR statistics."""

    def __init__(self, spec: PassSpec, tm, model: ModelArrays, result: PassResult):
        self.spec, self.model, self.result = spec, model, result
        self.id2pdf = np.asarray(tm.id2pdf_id, dtype=np.int64)
        self.silence = silence_transition_ids(tm, spec.silence_phones)
        self.utt2spk = spec.projection.utt2spk
        if "mllt" in spec.gather:
            dim = model.inv_vars.shape[1]
            result.mllt = MlltAccs(
                np.zeros((dim, dim * (dim + 1) // 2)), Stats.zeros(model.num_gauss, dim, tm.num_transition_ids)
            )

    def __call__(self, batch: FrameBatch) -> None:
        gather, model = self.spec.gather, self.model
        utts, tids, independent, adapted = batch.take()
        pdfs = self.id2pdf[tids]
        weights = FrameWeights.empty(len(tids), adapted.shape[1]) if "fmllr" in gather else None
        summed = independent if "twofeats" in gather else None
        accumulate(model, self.result.stats, adapted, pdfs, tids, summed, weights)
        speech = ~self.silence[tids]
        if self.result.mllt is not None:
            mllt_weights = FrameWeights.empty(int(speech.sum()), adapted.shape[1])
            frames = adapted[speech]
            accumulate(model, self.result.mllt.gauss, frames, pdfs[speech], tids[speech], None, mllt_weights)
            self.result.mllt.frames_term += mllt_frames_term(mllt_weights, frames)
        if weights is not None:
            self.add_speakers(utts, weights, independent, speech.astype(np.float64))

    def add_speakers(self, utts, weights: FrameWeights, independent: np.ndarray, frame_weight: np.ndarray) -> None:
        bounds = np.concatenate([[0], np.cumsum([n for _, n in utts])])
        for (utt, _), start, stop in zip(utts, bounds[:-1], bounds[1:]):
            part = slice(start, stop)
            acc = speaker_accs(
                FrameWeights(weights.inv_vars[part], weights.means_invvars[part]), independent[part], frame_weight[part]
            )
            speaker = self.utt2spk.get(utt, utt)
            if speaker in self.result.speakers:
                self.result.speakers[speaker].add(acc)
            else:
                self.result.speakers[speaker] = acc


def aligned_utterances(spec: PassSpec, feats: ShareFeatures, tm, am, result: PassResult):
    """(utt, transition ids) of the share's utterances that aligned."""
    graphs = kaldifst.SequentialVectorFstReader(f"ark:{spec.work_dir / f'fsts.{spec.index}.ark'}")
    started = time.perf_counter()
    for utt, frames in feats:
        if graphs.done or graphs.key != utt:
            raise InputError(
                f"{spec.work_dir}/fsts.{spec.index}.ark: graphs out of step with utts.{spec.index} at {utt}"
            )
        graph = graphs.value.copy()  # the reader reuses its FST on next()
        graphs.next()
        if spec.mode == "equal":
            tids, like, retried = equal_alignment(graph, len(frames), zlib.crc32(utt.encode()) & 0x7FFFFFFF), 0.0, False
        else:
            aligned = align(am, tm, graph, frames, spec.align_opts)
            tids, like, retried = aligned.tids, aligned.log_like, aligned.retried
        result.retried += retried
        if tids is None:
            result.failed.append(utt)
            continue
        result.aligned += 1
        result.align_log_like += like
        yield utt, tids
    result.align_seconds = time.perf_counter() - started


def joined(alignments, feats: ShareFeatures):
    """(utt, tids, unadapted, adapted features) for the utterances with an alignment (both in key order)."""
    pending = iter(alignments)
    current = next(pending, None)
    for utt, independent, adapted in feats.both():
        if current is None:
            return
        if current[0] != utt:
            continue
        tids = current[1]
        if len(tids) != len(adapted):
            raise InputError(f"{utt}: {len(tids)} transition ids for {len(adapted)} frames; stale alignments?")
        yield utt, tids, independent, adapted
        current = next(pending, None)


@dataclass
class TreeStatsSpec:
    """acc-tree-stats over one share: its utterances' alignments under the old model."""

    index: int
    work_dir: Path
    alignments: dict[str, np.ndarray]
    old_model: khg.TransitionModel
    ci_phones: list[int]
    projection: Projection


def share_tree_stats(spec: TreeStatsSpec):
    from asr.hmm.tree import accumulate_tree_stats  # the tree's statistics (acc-tree-stats)

    feats = ShareFeatures(spec.work_dir, spec.index, spec.projection)
    pairs = ((spec.alignments[utt], frames) for utt, frames in feats if utt in spec.alignments)
    return accumulate_tree_stats(spec.old_model, pairs, ci_phones=spec.ci_phones)


@dataclass
class LdaSpec:
    """acc-lda over one share: the statics spliced +-context, classed by the old alignment's pdfs."""

    index: int
    work_dir: Path
    alignments: dict[str, np.ndarray]
    old_model: khg.TransitionModel
    silence_phones: list[int]
    context: int


def share_lda_stats(spec: LdaSpec):
    """The share's LDA statistics (silence frames left out, as weight-silence-post 0.0 does)."""
    tm = spec.old_model
    id2pdf = np.asarray(tm.id2pdf_id, dtype=np.int64)
    speech = ~silence_transition_ids(tm, spec.silence_phones)
    stats = None
    for utt, statics in ShareFeatures(spec.work_dir, spec.index, Projection()).statics_by_utterance():
        tids = spec.alignments.get(utt)
        if tids is None or len(tids) != len(statics):
            continue
        keep = speech[tids]
        spliced = splice(statics, spec.context, spec.context)[keep]
        stats = add_lda_frames(stats, id2pdf[tids][keep], spliced, tm.num_pdfs)
    return stats
