"""Benchmark of the loader of fixed-length training samples (train.chunk_frames, asr/train/chunks.py)
beside the training step it must feed.

    python -m asr.bench chunks [--utts 400] [--chunk-frames 21] [--batch-samples 128]
                               [--pdfs 9000] [--steps 5] [--device auto] [--out exp/bench]

The feature set is synthetic at the paper's shape: 180 stored columns (fMLLR 40, i-vector 100,
log-mel 40) compressed as Kaldi's copy-feats --compress=true does, the log-mel's deltas and
double deltas appended by the reader (260 per frame), per-speaker CMVN; utterance lengths
between 1 and 15 s. Measured on one thread (the trainer reads on one prefetch thread):

  loader           samples/s through FrameChunks and collate as the trainer reads them
                   (a batch's samples decoded together, only their rows and the deltas' reach)
  rows_alone       the same samples, each decoded on its own (FeatureReader.rows)
  whole_utterance  the same samples, each cut from its whole decoded utterance (what reading
                   would cost without FeatureReader.rows)
  step             the paper's model (6 x 512 BLSTM, 256 bottleneck, --pdfs outputs) on one
                   batch: forward, backward and an SGD update, seconds and the samples/s it
                   consumes, on --device

Writes chunks.json and chunks.png into --out.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import kaldiio
import matplotlib
import numpy as np
import torch

from asr.bench.output import machine, settings, write_report
from asr.features.cmvn import compute_stats, write_stats
from asr.features.featureset import FeatureReader, LoadDeltas
from asr.models.blstm import build_model
from asr.models.config import ModelConfig
from asr.train.chunks import FrameChunks, SampleBatchSampler
from asr.train.data import collate
from asr.utils.atomic import atomic_path
from asr.utils.device import select_device
from asr.utils.log import log_to_stderr

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

log = logging.getLogger("asr.bench.chunks")

STORED, LOGMEL = 180, (140, 180)  # stored columns; the log-mel's, whose deltas the reader appends


def write_feature_set(directory: Path, utts: int, seed: int = 0) -> SimpleNamespace:
    """A compressed set of `utts` utterances at the paper's shape, and its frame-level targets."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    mats, utt2spk = {}, {}
    for i in range(utts):
        speaker = f"spk{i % 20:02d}"
        utt = f"{speaker}_{i:06d}"
        frames = int(rng.integers(100, 1500))
        drift = np.cumsum(rng.standard_normal((frames, 1)), axis=0) * 0.2
        mats[utt] = (rng.uniform(-3, 3, STORED) + drift + rng.standard_normal((frames, STORED))).astype(np.float32)
        utt2spk[utt] = speaker
    kaldiio.save_ark(str(directory / "feats.ark"), mats, scp=str(directory / "feats.scp"), compression_method=1)
    (directory / "utt2num_frames").write_text("".join(f"{u} {len(m)}\n" for u, m in mats.items()))
    deltas = LoadDeltas(order=2, window=2, first=LOGMEL[0], last=LOGMEL[1])
    deltas.write(directory)
    (directory / "feat_dim").write_text(f"{STORED + deltas.added_dim}\n")
    write_stats(
        compute_stats("speaker", {u: deltas(m) for u, m in mats.items()}, utt2spk), directory, "speaker"
    )  # of what the reader returns
    reader = FeatureReader(directory, utt2spk)
    names = sorted(mats)
    targets = [rng.integers(0, 100, len(mats[u])).astype(np.int16) for u in names]
    return SimpleNamespace(
        utts=names,
        num_frames=[len(mats[u]) for u in names],
        targets=targets,
        reader=reader,
        feat_dim=reader.feat_dim,
        pdf_counts=None,
        max_pdf=None,
    )


class RowsAlone(FrameChunks):
    """The same samples, each decoded on its own (FeatureReader.rows)."""

    def __getitems__(self, indices):
        utts, starts = self.locate(indices)
        return [
            (
                f"{self.utterances.utts[u]}@{start}",
                self.reader.rows(self.utterances.utts[u], start, start + self.chunk_frames),
                torch.from_numpy(self.utterances.targets[u][start : start + self.chunk_frames].astype(np.int64)),
            )
            for u, start in zip(utts.tolist(), starts.tolist())
        ]


class WholeUtterances(FrameChunks):
    """The same samples, each cut from its whole decoded utterance."""

    def __getitems__(self, indices):
        utts, starts = self.locate(indices)
        items = []
        for u, start in zip(utts.tolist(), starts.tolist()):
            utt = self.utterances.utts[u]
            feats = self.reader(utt)[start : start + self.chunk_frames]
            items.append(
                (
                    f"{utt}@{start}",
                    feats,
                    torch.from_numpy(self.utterances.targets[u][start : start + self.chunk_frames].astype(np.int64)),
                )
            )
        return items


def time_loader(dataset: FrameChunks, batch_samples: int, seconds: float) -> dict:
    """Samples/s of reading and collating batches (at least two batches, about `seconds`)."""
    sampler = SampleBatchSampler(len(dataset), batch_samples, seed=1)
    batches, samples, wall, cpu = 0, 0, time.perf_counter(), time.process_time()
    for batch in sampler:
        collate(dataset.__getitems__(batch))
        batches, samples = batches + 1, samples + len(batch)
        if batches >= 2 and time.perf_counter() - wall > seconds:
            break
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "batches": batches,
        "samples": samples,
        "seconds": round(wall, 3),
        "cpu_seconds": round(cpu, 3),
        "samples_per_second": round(samples / wall, 1),
        "samples_per_cpu_second": round(samples / cpu, 1),
    }


def time_step(
    feat_dim: int, pdfs: int, batch_samples: int, chunk_frames: int, steps: int, device: torch.device
) -> dict:
    """The paper's model on one batch of samples: forward, backward, update (after a warm-up)."""
    cfg = ModelConfig(
        num_layers=6,
        hidden_size=512,
        bidirectional=True,
        bottleneck=256,
        dropout=0.1,
        stack_frames=1,
        subsample=1,
        head="frame_ce",
    )
    model = build_model(cfg, feat_dim, pdfs).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True)
    feats = torch.randn(batch_samples, chunk_frames, feat_dim, device=device)
    lens = torch.full((batch_samples,), chunk_frames, dtype=torch.long, device=device)
    targets = torch.randint(0, pdfs, (batch_samples * chunk_frames,), device=device)
    times = []
    for i in range(steps + 1):
        start = time.perf_counter()
        log_probs, _ = model(feats, lens)
        loss = torch.nn.functional.nll_loss(log_probs.reshape(-1, pdfs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i:  # the first builds kernels
            times.append(time.perf_counter() - start)
    median = float(np.median(times))
    return {
        "device": str(device),
        "steps": steps,
        "step_seconds_median": round(median, 4),
        "samples_per_second": round(batch_samples / median, 1),
    }


def run(args) -> dict:
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        utterances = write_feature_set(Path(tmp) / "set", args.utts)
        chunks = FrameChunks(utterances, args.chunk_frames, 1, seed=0)
        whole = WholeUtterances(utterances, args.chunk_frames, 1, seed=0)
        frames = int(sum(utterances.num_frames))
        report = {
            "set": {
                "utterances": args.utts,
                "frames": frames,
                "samples": len(chunks),
                "feat_dim": utterances.feat_dim,
                "stored_dim": STORED,
                "compressed": True,
                "cmvn": "speaker",
            }
        }
        report["loader"] = time_loader(chunks, args.batch_samples, args.seconds)
        report["rows_alone"] = time_loader(
            RowsAlone(utterances, args.chunk_frames, 1, seed=0), args.batch_samples, args.seconds
        )
        report["whole_utterance"] = time_loader(whole, args.batch_samples, args.seconds)
        log.info(
            "loader %.0f samples/s, each sample decoded alone %.0f, cut from whole utterances %.0f",
            *(report[k]["samples_per_second"] for k in ("loader", "rows_alone", "whole_utterance")),
        )
    report["step"] = time_step(
        utterances.feat_dim, args.pdfs, args.batch_samples, args.chunk_frames, args.steps, select_device(args.device)
    )
    report["loader_over_step"] = round(report["loader"]["samples_per_second"] / report["step"]["samples_per_second"], 2)
    log.info(
        "step %.3f s on %s: %.0f samples/s consumed; the loader reads %.2fx that",
        report["step"]["step_seconds_median"],
        report["step"]["device"],
        report["step"]["samples_per_second"],
        report["loader_over_step"],
    )
    return report


def plot(report: dict, path: Path) -> None:
    fig = Figure(figsize=(6, 4), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    names = ["loader", "rows_alone", "whole_utterance", "step"]
    labels = [
        "loader\n(batch decoded)",
        "sample by\nsample",
        "whole\nutterances",
        f"training step\n({report['step']['device']})",
    ]
    values = [report[n]["samples_per_second"] for n in names]
    ax.bar(labels, values, color=["tab:blue", "tab:cyan", "tab:gray", "tab:orange"])
    ax.set_yscale("log")
    ax.set_ylabel("samples / s (one thread for the loader)")
    s = report["settings"]
    ax.set_title(f"{s['chunk_frames']}-frame samples, {s['batch_samples']} a batch, {report['set']['feat_dim']} dims")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.bench chunks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--utts", type=int, default=400, help="synthetic utterances (default %(default)s)")
    parser.add_argument("--chunk-frames", type=int, default=21)
    parser.add_argument("--batch-samples", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=10.0, help="reading time per loader (default %(default)s)")
    parser.add_argument("--pdfs", type=int, default=9000, help="output layer size (default %(default)s)")
    parser.add_argument("--steps", type=int, default=5, help="timed training steps (default %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default %(default)s)")
    parser.add_argument(
        "--device", default="auto", help="of the training step: auto | cpu | cuda (default %(default)s)"
    )
    parser.add_argument("--out", type=Path, default=Path("exp/bench"))
    args = parser.parse_args(argv)
    log_to_stderr()
    start = time.time()
    report = run(args)
    report = {
        "benchmark": "chunks",
        "settings": settings(args),
        "machine": machine(torch_threads=torch.get_num_threads()),
        "seconds": round(time.time() - start, 1),
    } | report
    write_report(report, args.out, "chunks", plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
