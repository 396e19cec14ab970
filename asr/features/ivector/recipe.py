"""The i-vector feature recipes: `features.kind=ivector` (per frame, the i-vector alone) and the
i-vectors that `fmllr_ivector_fbank` puts between fMLLR and log-mel (asr.features.fmllr.recipe).

Every set's i-vectors are extracted one of two ways (`features.ivector.train` for the
training set, `features.ivector.test` for the dev and eval sets):
  speaker   one i-vector per speaker from all its frames (capped at max_count), as the hybrid
            recipes' steps/nnet/ivector/extract_ivectors.sh
  online    per utterance, one i-vector every `period` frames from the frames so far, as
            ivector-extract-online2 (each utterance starts from the prior: no state is carried
            from a speaker's earlier utterances)

Layout under <feats_dir>/<name>/:
  fbank/<set>/      the log-mel filterbank (asr.features.logmel.extract)
  extractor/        the extractor, trained on the training set (asr.features.ivector.model)
  <set>/ (kind=ivector) or ivector/<set>/ (fmllr_ivector_fbank):
      ivector_online.{ark,scp}  per utterance, a matrix with a row per `ivector_period` frames
                                (Kaldi's extract_ivectors_online.sh layout, read by nnet3)
      ivector_period            frames per row
      ivectors_spk.{ark,scp}    (speaker extraction) a vector per speaker
      ivector_report.json       how they were made; for online extraction, the equal error
                                rate of cosine scoring between the utterances' last i-vectors
      feats.{ark,scp}, utt2num_frames, feat_dim, cmvn_type   (kind=ivector) the i-vector
                                repeated for every frame, used as it is (cmvn_type none)
The i-vectors are Kaldi float matrices and vectors (kaldiio), the prior offset subtracted.

`features.ivector.kaldi_dir=DIR` uses Kaldi's i-vectors as they are instead of extracting:
DIR/<set>/ (or Kaldi's DIR/ivectors_<set>/) with ivector_online.scp and ivector_period
(referenced, not copied), or ivectors_spk.scp (one vector per speaker, repeated here).
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import kaldiio
import numpy as np
import torch

from asr.data.datadir import read_data_dir
from asr.features import cmvn
from asr.features.ivector import extractor as iv
from asr.features.logmel.extract import extract_set
from asr.features.pool import run_parts, single_thread
from asr.features.summary import SetSummary, log_summary
from asr.features.logmel.options import FbankOptions
from asr.features.featureset import FeatureWriter
from asr.features.ivector.model import IvectorModel, LogmelFrames, train_ivector_model, write_report
from asr.features.parts import join_parts, repoint_scp
from asr.features.provenance import made_with, plain, seal, source_files, why_incomplete
from asr.features.subset import speaker_utterances, split_speakers
from asr.kaldi.table import read_table, write_table
from asr.utils.atomic import atomic_dir
from asr.utils.errors import InputError
from asr.utils.record import verify, verify_table

log = logging.getLogger("asr.features")

MODES = ("speaker", "online")
# The options the extractor depends on (the others only change how sets are extracted).
MODEL_OPTIONS = (
    "dim",
    "splice_left",
    "splice_right",
    "pca_dim",
    "num_components",
    "ubm_frames",
    "diag_iters",
    "full_iters",
    "num_gselect",
    "min_post",
    "posterior_scale",
    "em_iters",
    "train_subsample",
    "min_count",
    "variance_floor_factor",
    "seed",
)
EER_UTTERANCES = 2000  # the EER diagnostic scores at most this many utterances (spread over the set)


def make_ivector_features(cfg: Any) -> list[SetSummary]:
    """The stage for kind=ivector: log-mel of every set, the extractor, per-frame i-vectors."""
    fcfg = cfg.features
    root = Path(fcfg.feats_dir) / fcfg.name
    base = make_base_sets(cfg, root)
    if fcfg.split.index >= 0:
        return base  # one cluster share of the log-mel: the extractor runs after the merge
    return [summary for _, summary in ivector_sets(cfg, root, root, write_feats=True).values()]


def make_base_sets(cfg: Any, root: Path) -> list[SetSummary]:
    """The log-mel filterbank of every set into root/fbank/<set> (per-speaker CMVN stats beside),
    or with features.split.index only that share of each."""
    fcfg = cfg.features
    options = FbankOptions.from_config(fcfg)
    return [
        extract_set(
            Path(cfg.data.data_dir) / set_name,
            root / "fbank" / set_name,
            options,
            cmvn_unit="speaker",
            jobs=fcfg.jobs,
            device=fcfg.device,
            batch_seconds=fcfg.batch_seconds,
            force=fcfg.force,
            compress=fcfg.compress,
            split=(fcfg.split.index, fcfg.split.count),
        )
        for set_name in (cfg.data.train_set, cfg.data.dev_set, cfg.data.eval_set)
    ]


def check_options(fcfg: Any) -> None:
    icfg = fcfg.ivector
    for key in ("train", "test"):
        if getattr(icfg, key) not in MODES:
            raise InputError(f"features.ivector.{key}={getattr(icfg, key)!r}: choose one of {MODES}")
    for key in ("period", "train_subsample"):
        if getattr(icfg, key) < 1:
            raise InputError(f"features.ivector.{key}={getattr(icfg, key)}: must be at least 1 (frames)")
    spliced = FbankOptions.from_config(fcfg).dim * (icfg.splice_left + 1 + icfg.splice_right)
    if icfg.pca_dim > spliced:
        raise InputError(f"features.ivector.pca_dim={icfg.pca_dim} exceeds the spliced log-mel dimension {spliced}")


def ivector_sets(cfg: Any, root: Path, into: Path, write_feats: bool) -> dict[str, tuple[Path, SetSummary]]:
    """Every set's i-vectors into `into`/<set> (from the extractor, trained first if needed, or
    imported from features.ivector.kaldi_dir); set name -> (directory, summary)."""
    fcfg = cfg.features
    check_options(fcfg)
    sets = (cfg.data.train_set, cfg.data.dev_set, cfg.data.eval_set)
    out = {}
    if fcfg.ivector.kaldi_dir:
        for set_name in sets:
            out[set_name] = (
                into / set_name,
                import_ivector_set(
                    Path(fcfg.ivector.kaldi_dir),
                    set_name,
                    root / "fbank" / set_name,
                    Path(cfg.data.data_dir) / set_name,
                    into / set_name,
                    fcfg,
                    write_feats,
                ),
            )
        return out
    ensure_extractor(
        root / "extractor", root / "fbank" / cfg.data.train_set, Path(cfg.data.data_dir) / cfg.data.train_set, fcfg
    )
    for set_name in sets:
        mode = fcfg.ivector.train if set_name == cfg.data.train_set else fcfg.ivector.test
        out[set_name] = (
            into / set_name,
            extract_ivector_set(
                root / "extractor",
                root / "fbank" / set_name,
                Path(cfg.data.data_dir) / set_name,
                into / set_name,
                fcfg,
                mode,
                write_feats,
            ),
        )
    return out


def feats_options(fcfg: Any, write_feats: bool) -> dict:
    """What changes the per-frame features an i-vector set writes beside its i-vectors."""
    return {"write_feats": write_feats, "compress": fcfg.compress if write_feats else None}


def model_options(icfg: Any) -> dict:
    options = plain(icfg)
    return {key: options[key] for key in MODEL_OPTIONS}


# ------------------------------------------------------------------------ model


def ensure_extractor(model_dir: Path, base_dir: Path, data_dir: Path, fcfg: Any) -> None:
    """Train the extractor unless `model_dir` holds one made from the same options and log-mel set."""
    options, inputs = model_options(fcfg.ivector), source_files(base_dir)
    reason = why_incomplete(model_dir, options, inputs, fcfg.force)
    if reason is None:
        log.info("i-vector extractor: complete already (%s)", model_dir)
        return
    log.info("i-vector extractor: training on %s into %s (%s)", base_dir, model_dir, reason)
    started = time.perf_counter()
    utt2spk = read_data_dir(data_dir, tables=()).utt2spk
    num_frames = {u: int(n) for u, n in read_table(base_dir / "utt2num_frames").items() if u in utt2spk}
    with atomic_dir(model_dir) as tmp:
        report = train_ivector_model(base_dir, utt2spk, num_frames, fcfg.ivector, tmp, fcfg.device, fcfg.jobs)
        report["seconds"] = round(time.perf_counter() - started, 1)
        write_report(tmp / "report.json", report)
        seal(tmp, options, inputs)
    log.info("i-vector extractor: trained in %.1f s", report["seconds"])


# -------------------------------------------------------------------------- sets


@dataclass
class ExtractTask:
    index: int
    model_dir: str
    base_dir: str
    out_dir: str  # the set's temporary directory; the part writes <name>.<index>.{ark,scp} there
    speakers: dict[str, list[str]]
    mode: str
    period: int
    max_count: float
    device: str
    write_feats: bool
    compress: bool = False  # the per-frame features as Kaldi's compressed matrices
    eer_utts: frozenset[str] = frozenset()  # the utterances whose last i-vector the EER diagnostic scores


@dataclass
class ExtractResult:
    num_frames: dict[str, int] = field(default_factory=dict)
    speaker_ivectors: dict[str, np.ndarray] = field(default_factory=dict)  # speaker extraction
    last_ivectors: dict[str, np.ndarray] = field(default_factory=dict)  # online: the EER sample's last rows


def extract_ivector_set(
    model_dir: Path,
    base_dir: Path,
    data_dir: Path,
    out_dir: Path,
    fcfg: Any,
    mode: str,
    write_feats: bool,
) -> SetSummary:
    """One set's i-vectors (and, with `write_feats`, per-frame features), its speakers split
    over `features.jobs` worker processes."""
    icfg = fcfg.ivector
    options = {"mode": mode, "period": icfg.period, "max_count": icfg.max_count, **feats_options(fcfg, write_feats)}
    made_from = (options, made_with(model_dir) + source_files(base_dir))
    if why_incomplete(out_dir, *made_from, fcfg.force) is None:
        log.info(
            "%s: i-vectors complete already (%s), skipping; features.force=true recomputes them", out_dir.name, out_dir
        )
        return SetSummary(out_dir.name, 0, 0, 0.0, 0.0, 0, skipped=True)
    started = time.perf_counter()
    utt2spk = read_data_dir(data_dir, tables=()).utt2spk
    num_frames = {u: int(n) for u, n in read_table(base_dir / "utt2num_frames").items() if u in utt2spk}
    speakers = speaker_utterances(num_frames, utt2spk)
    if not speakers:
        raise InputError(f"{base_dir}: no features to extract i-vectors from; check the filterbank stage's log")
    parts = split_speakers(speakers, num_frames, fcfg.jobs)
    log.info(
        "%s: %s i-vectors for %d speakers in %d part(s) into %s", out_dir.name, mode, len(speakers), len(parts), out_dir
    )
    with atomic_dir(out_dir) as tmp:
        eer_utts = frozenset(sorted(num_frames)[:: max(1, -(-len(num_frames) // EER_UTTERANCES))])
        tasks = [
            ExtractTask(
                i,
                str(model_dir),
                str(base_dir),
                str(tmp),
                part,
                mode,
                icfg.period,
                icfg.max_count,
                fcfg.device,
                write_feats,
                fcfg.compress,
                eer_utts,
            )
            for i, part in enumerate(parts)
        ]
        results = run_parts(tasks, desc=f"{out_dir.name} i-vectors", total=len(speakers), work=extract_part, unit="spk")
        for name in ("ivector_online", "feats") if write_feats else ("ivector_online",):
            join_parts(tmp, out_dir, len(parts), name)
        speaker_ivectors = {s: v for r in results for s, v in r.speaker_ivectors.items()}
        if speaker_ivectors:
            write_vectors(tmp, out_dir, "ivectors_spk", speaker_ivectors)
        report = {
            "mode": mode,
            "period": icfg.period,
            "max_count": icfg.max_count,
            "speakers": len(speakers),
            "utterances": len(num_frames),
            **eer_report({u: v for r in results for u, v in r.last_ivectors.items()}, utt2spk),
        }
        _finish_set(
            tmp,
            out_dir,
            base_dir,
            {u: n for r in results for u, n in r.num_frames.items()},
            icfg.dim,
            report,
            made_from,
            write_feats,
        )
    summary = SetSummary(out_dir.name, len(num_frames), sum(num_frames.values()), 0.0, time.perf_counter() - started, 0)
    summary.seconds = summary.frames * fcfg.frame_shift_ms / 1000.0
    log_summary(summary)
    return summary


def _finish_set(
    tmp: Path,
    out_dir: Path,
    base_dir: Path,
    num_frames: dict[str, int],
    dim: int,
    report: dict,
    made_from: tuple[dict, list[Path]],
    write_feats: bool,
) -> None:
    (tmp / "ivector_period").write_text(f"{report['period']}\n")
    write_report(tmp / "ivector_report.json", report)
    if write_feats:
        write_table(tmp / "utt2num_frames", {u: str(n) for u, n in num_frames.items()})
        (tmp / "feat_dim").write_text(f"{dim}\n")
        cmvn.write_stats({}, tmp, "none")  # an i-vector is used as it is
        for name in ("fbank.conf", "skipped"):
            if (base_dir / name).is_file():
                shutil.copyfile(base_dir / name, tmp / name)
    seal(tmp, *made_from)


def eer_report(last_ivectors: dict[str, np.ndarray], utt2spk: dict[str, str]) -> dict:
    """The speaker equal error rate of utterances' i-vectors (online extraction only)."""
    if not last_ivectors:
        return {"speaker_eer": None}
    utts = sorted(last_ivectors)
    speakers = [utt2spk[u] for u in utts]
    eer = iv.speaker_eer(np.stack([last_ivectors[u] for u in utts]), speakers)
    log.info(
        "i-vectors of %d utterances (%d speakers): equal error rate %.2f%% (cosine scoring, same vs different speaker)",
        len(utts),
        len(set(speakers)),
        100 * eer,
    )
    return {"speaker_eer": round(eer, 4), "eer_utterances": len(utts), "eer_speakers": len(set(speakers))}


def write_vectors(tmp: Path, out_dir: Path, name: str, vectors: dict[str, np.ndarray]) -> None:
    """<name>.{ark,scp}: Kaldi float vectors by key (C-sorted), the scp naming the final directory."""
    with kaldiio.WriteHelper(f"ark,scp:{tmp / f'{name}.ark'},{tmp / f'{name}.scp'}") as writer:
        for key in sorted(vectors, key=lambda k: k.encode()):
            writer(key, np.ascontiguousarray(vectors[key], dtype=np.float32))
    repoint_scp(tmp / f"{name}.scp", out_dir.absolute() / f"{name}.ark")


def extract_part(task: ExtractTask, on_speaker_done: Callable[[], None]) -> ExtractResult:
    """One part's speakers: ivector_online.<index> (and feats.<index>) in task.out_dir."""
    with single_thread():
        return _extract_part(task, on_speaker_done)


def _extract_part(task: ExtractTask, on_speaker_done: Callable[[], None]) -> ExtractResult:
    model = IvectorModel.load(task.model_dir, task.device)
    logmel = LogmelFrames(task.base_dir)
    result = ExtractResult()
    out = Path(task.out_dir)
    online = kaldiio.WriteHelper(
        f"ark,scp:{out / f'ivector_online.{task.index}.ark'},{out / f'ivector_online.{task.index}.scp'}"
    )
    feats = (
        FeatureWriter(out / f"feats.{task.index}.ark", out / f"feats.{task.index}.scp", task.compress)
        if task.write_feats
        else None
    )
    try:
        for speaker, utts in task.speakers.items():
            for utt, rows, frames in speaker_ivectors(model, logmel, speaker, utts, task, result):
                online(utt, rows.astype(np.float32))
                result.num_frames[utt] = frames
                if feats is not None:
                    feats(utt, per_frame(rows, frames, task.period).astype(np.float32))
            on_speaker_done()
    finally:
        online.close()
        if feats is not None:
            feats.close()
    return result


def speaker_ivectors(
    model: IvectorModel, logmel: LogmelFrames, speaker: str, utts: list[str], task: ExtractTask, result: ExtractResult
) -> list[tuple[str, np.ndarray, int]]:
    """(utt, i-vector rows at the period, frames) for one speaker's utterances."""
    assert model.extractor is not None
    xs = [model.frames(logmel(u)) for u in utts]
    lengths = [x.shape[0] for x in xs]
    # One posterior computation for all of the speaker's frames: its cost per call is per
    # component the frames select, however few frames there are.
    indices, weights = model.ubm.posteriors(torch.cat(xs))
    posteriors = list(zip(indices.split(lengths), weights.split(lengths)))
    out = []
    if task.mode == "speaker":
        c = model.extractor.num_components
        stats = [iv.zeroth_first_order(x, i, w, c) for x, (i, w) in zip(xs, posteriors)]
        counts, first = sum(s[0] for s in stats), sum(s[1] for s in stats)
        vector = iv.extract(model.extractor, counts, first, task.max_count)[0].cpu().numpy()
        result.speaker_ivectors[speaker] = vector
        for utt, x in zip(utts, xs):
            rows = -(-x.shape[0] // task.period)
            out.append((utt, np.tile(vector, (rows, 1)), x.shape[0]))
        return out
    for utt, x, (indices, weights) in zip(utts, xs, posteriors):
        rows = iv.extract_online(model.extractor, x, indices, weights, task.period, task.max_count).cpu().numpy()
        if utt in task.eer_utts:  # a sample, not every utterance: a row per utterance would grow with the set
            result.last_ivectors[utt] = rows[-1]
        out.append((utt, rows, x.shape[0]))
    return out


def per_frame(rows: np.ndarray, frames: int, period: int) -> np.ndarray:
    """Each frame's i-vector: row t // period (the last row for frames past the rows' end)."""
    return rows[np.minimum(np.arange(frames) // period, len(rows) - 1)]


class IvectorReader:
    """A set's i-vectors per frame, from ivector_online.scp and ivector_period (ours or Kaldi's)."""

    def __init__(self, set_dir: str | Path):
        self.set_dir = Path(set_dir)
        scp, period = self.set_dir / "ivector_online.scp", self.set_dir / "ivector_period"
        if not scp.is_file() or not period.is_file():
            raise InputError(f"{self.set_dir}: no ivector_online.scp and ivector_period; re-run the features stage")
        verify(period, "i-vector period")
        verify_table(scp, "i-vectors")
        try:
            self.period = int(period.read_text().split()[0])
        except (ValueError, IndexError):
            raise InputError(f"{period}: expected the number of frames per i-vector") from None
        self.rows = kaldiio.load_scp(str(scp))

    def __call__(self, utt: str, frames: int) -> np.ndarray:
        """(frames, R) float32; a Kaldi matrix may be one row short (its frames were counted differently)."""
        try:
            rows = np.asarray(self.rows[utt])
        except KeyError:
            raise InputError(f"{self.set_dir / 'ivector_online.scp'}: no i-vectors for utterance {utt!r}") from None
        except Exception as err:
            raise InputError(f"{self.set_dir / 'ivector_online.scp'}: cannot read {utt!r} ({err})") from None
        needed = -(-frames // self.period)
        if rows.ndim != 2 or len(rows) < needed - 1:
            raise InputError(
                f"{self.set_dir / 'ivector_online.scp'}: {utt!r} has {rows.shape[0] if rows.ndim else 0} "
                f"i-vectors, {frames} frames need {needed} at ivector_period {self.period}"
            )
        return per_frame(rows, frames, self.period).astype(np.float32)


# ----------------------------------------------------------------- Kaldi import


def import_ivector_set(
    kaldi_dir: Path, set_name: str, base_dir: Path, data_dir: Path, out_dir: Path, fcfg: Any, write_feats: bool
) -> SetSummary:
    """Kaldi's i-vectors of one set, used as they are (see the module's docstring)."""
    source = next((d for d in (kaldi_dir / set_name, kaldi_dir / f"ivectors_{set_name}") if d.is_dir()), None)
    if source is None:
        raise InputError(
            f"features.ivector.kaldi_dir={kaldi_dir}: no {set_name}/ or ivectors_{set_name}/ directory "
            "(Kaldi's extract_ivectors_online.sh or steps/nnet/ivector/extract_ivectors.sh output)"
        )
    online, per_speaker = source / "ivector_online.scp", source / "ivectors_spk.scp"
    if not online.is_file() and not per_speaker.is_file():
        raise InputError(f"{source}: neither ivector_online.scp (with ivector_period) nor ivectors_spk.scp")
    imported = online if online.is_file() else per_speaker
    options = {"kaldi_dir": str(source), "period": fcfg.ivector.period, **feats_options(fcfg, write_feats)}
    made_from = (options, [imported, *source_files(base_dir)])
    if why_incomplete(out_dir, *made_from, fcfg.force) is None:
        log.info("%s: i-vectors complete already (%s), skipping", out_dir.name, out_dir)
        return SetSummary(out_dir.name, 0, 0, 0.0, 0.0, 0, skipped=True)
    utt2spk = read_data_dir(data_dir, tables=()).utt2spk
    num_frames = {u: int(n) for u, n in read_table(base_dir / "utt2num_frames").items() if u in utt2spk}
    with atomic_dir(out_dir) as tmp:
        if online.is_file():
            shutil.copyfile(online, tmp / "ivector_online.scp")  # Kaldi's arks, referenced where they are
            if not (source / "ivector_period").is_file():
                raise InputError(f"{source}: ivector_online.scp without ivector_period")
            shutil.copyfile(source / "ivector_period", tmp / "ivector_period")
            report = {"imported_from": str(online)}
        else:
            _repeat_speaker_ivectors(per_speaker, utt2spk, num_frames, fcfg.ivector.period, tmp)
            report = {"imported_from": str(per_speaker)}
        reader = IvectorReader(tmp)
        report |= {"period": reader.period, "utterances": len(num_frames)}
        dim = _check_dim(reader, num_frames, fcfg.ivector.dim)
        if write_feats:
            with FeatureWriter(tmp / "feats.ark", tmp / "feats.scp", fcfg.compress) as writer:
                for utt, frames in num_frames.items():
                    writer(utt, reader(utt, frames))
            repoint_scp(tmp / "feats.scp", out_dir.absolute() / "feats.ark")
        if not online.is_file():  # the arks written here: name them where they will be
            repoint_scp(tmp / "ivector_online.scp", out_dir.absolute() / "ivector_online.ark")
        _finish_set(tmp, out_dir, base_dir, num_frames, dim, report, made_from, write_feats)
    log.info("%s: %d utterances' i-vectors imported from %s", out_dir.name, len(num_frames), source)
    return SetSummary(out_dir.name, len(num_frames), sum(num_frames.values()), 0.0, 0.0, 0)


def _repeat_speaker_ivectors(
    scp: Path, utt2spk: dict[str, str], num_frames: dict[str, int], period: int, tmp: Path
) -> None:
    vectors = {k: np.asarray(v) for k, v in kaldiio.load_scp(str(scp)).items()}
    with kaldiio.WriteHelper(f"ark,scp:{tmp / 'ivector_online.ark'},{tmp / 'ivector_online.scp'}") as writer:
        for utt, frames in num_frames.items():
            if utt2spk[utt] not in vectors:
                raise InputError(f"{scp}: no i-vector for speaker {utt2spk[utt]!r} (utterance {utt!r})")
            writer(utt, np.tile(vectors[utt2spk[utt]].astype(np.float32).reshape(1, -1), (-(-frames // period), 1)))
    (tmp / "ivector_period").write_text(f"{period}\n")


def _check_dim(reader: IvectorReader, num_frames: dict[str, int], expected: int) -> int:
    """Every utterance has i-vectors of the configured dimension (read them all once)."""
    dims = {reader(utt, frames).shape[1] for utt, frames in num_frames.items()}
    if dims != {expected}:
        raise InputError(
            f"{reader.set_dir}: i-vectors of dimension {sorted(dims)}, but features.ivector.dim={expected}; "
            f"set features.ivector.dim to the Kaldi i-vectors' dimension"
        )
    return expected
