"""Throughput of one learner's training step on the Switchboard preset's model, in frames/s.

    python -m asr.bench model [--experiment swb2000_hybrid_adpsgd] [--pdfs 32000]
                              [--batch-samples 128] [--precisions fp32,bf16] [--steps 10]
                              [--warmup 2] [--device auto] [--threads 0] [--out exp/bench]

The model, optimizer, schedule, clipping and precision are the preset's (the composed config of
`experiment=...`, as `asr.train` composes it): the paper's 6 x 512 BLSTM with a 256 bottleneck
over 260-dim input, `--pdfs` outputs (the paper's tree has about 32k). A step is what the
trainer does for one batch on one learner: the batch moved to the device, forward under the
trainer's autocast, the frame cross-entropy of every frame (asr.train.objectives), backward and
the Updater's step (clip, optimizer, schedule), on random features and targets of
`--batch-samples` samples of 21 frames. No data loading (asr.bench chunks measures the loader)
and no communication (asr.bench cluster). A precision the device cannot compute is reported as
skipped with the reason, as `train.precision` would refuse or warn.

frames/s counts every frame of every sample (samples/s x 21). The paper's 64 V100s trained 16
epochs of SWB-2000 (about 2,000 h, 7.2e8 frames an epoch at 10 ms) in 5.2 h: about 9.6k
frames/s per V100, the reference line of the plot.

Writes model.json and model.png into --out.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from asr.bench.output import machine, settings, write_report
from asr.config import load_config
from asr.models.blstm import build_model
from asr.optim.updater import build_updater
from asr.train.data import Batch
from asr.train.objectives import frame_ce_utterance_losses
from asr.train.precision import autocast, training_precision, use_ieee_fp32
from asr.utils.atomic import atomic_path
from asr.utils.device import cpu_name, select_device
from asr.utils.errors import InputError
from asr.utils.log import log_to_stderr

log = logging.getLogger("asr.bench")

FEAT_DIM = 260  # fMLLR 40 + i-vector 100 + log-mel 40 with deltas: the paper's input
PAPER_FRAMES_PER_S_PER_V100 = 2000 * 3600 * 100 * 16 / (5.2 * 3600) / 64  # 9,615


def batch_of_samples(samples: int, frames: int, pdfs: int, generator: torch.Generator) -> Batch:
    feats = torch.randn(samples, frames, FEAT_DIM, generator=generator)
    lens = torch.full((samples,), frames, dtype=torch.long)
    targets = torch.randint(0, pdfs, (samples * frames,), generator=generator)
    return Batch([f"s{i}" for i in range(samples)], feats, lens, targets, lens.clone())


def time_precision(cfg, precision: str, args, device: torch.device) -> dict:
    """Median seconds of `args.steps` training steps (after `args.warmup`) in one precision."""
    try:
        precision = training_precision(precision, device)
    except InputError as err:
        return {"precision": precision, "skipped": str(err)}
    use_ieee_fp32(device, precision)
    torch.manual_seed(0)
    model = build_model(cfg.model, FEAT_DIM, args.pdfs).to(device)
    updater = build_updater(model, cfg.train, total_steps=args.warmup + args.steps)
    batch = batch_of_samples(args.batch_samples, cfg.train.chunk_frames, args.pdfs, torch.Generator().manual_seed(1))
    if device.type == "cuda":
        batch = batch.pin_memory()
    times = []
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        on_device = batch.to(device, non_blocking=True)
        with autocast(device, precision):
            log_probs, out_lens = model(on_device.feats, on_device.feat_lens)
        loss = frame_ce_utterance_losses(log_probs.float(), out_lens, on_device).sum()
        updater.step(loss / int(out_lens.sum()), weight=int(out_lens.sum()))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    median = float(np.median(times))
    frames = args.batch_samples * cfg.train.chunk_frames
    return {
        "precision": precision,
        "steps": args.steps,
        "step_seconds_median": round(median, 4),
        "step_seconds": [round(t, 4) for t in times],
        "samples_per_second": round(args.batch_samples / median, 1),
        "frames_per_second": round(frames / median, 1),
    }


def run(args) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    device = select_device(args.device)
    cfg = load_config([f"experiment={args.experiment}", f"device={args.device}"])
    if not cfg.train.chunk_frames:
        raise InputError(f"experiment={args.experiment} trains on whole utterances; choose a hybrid preset")
    parameters = sum(p.numel() for p in build_model(cfg.model, FEAT_DIM, args.pdfs).parameters())
    runs = []
    for precision in args.precisions.split(","):
        result = time_precision(cfg, precision, args, device)
        runs.append(result)
        if "skipped" in result:
            log.info("%s: skipped (%s)", precision, result["skipped"])
        else:
            log.info(
                "%s on %s: %.3f s a step, %.0f frames/s",
                precision,
                device,
                result["step_seconds_median"],
                result["frames_per_second"],
            )
    return {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
        "model": {
            "experiment": args.experiment,
            "layers": cfg.model.num_layers,
            "hidden": cfg.model.hidden_size,
            "bottleneck": cfg.model.bottleneck,
            "pdfs": args.pdfs,
            "parameters": parameters,
            "input_dim": FEAT_DIM,
        },
        "batch": {"samples": args.batch_samples, "chunk_frames": cfg.train.chunk_frames},
        "runs": runs,
        "paper_frames_per_second_per_v100": round(PAPER_FRAMES_PER_S_PER_V100),
    }


def plot(report: dict, path: Path) -> None:
    fig = Figure(figsize=(6, 4), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    done = [r for r in report["runs"] if "skipped" not in r]
    ax.bar([r["precision"] for r in done], [r["frames_per_second"] for r in done], color="tab:blue")
    ax.axhline(report["paper_frames_per_second_per_v100"], color="tab:red", linestyle="--", label="the paper: a V100")
    for i, r in enumerate(done):
        ax.annotate(f"{r['frames_per_second']:,.0f}", (i, r["frames_per_second"]), ha="center", va="bottom")
    ax.set_yscale("log")
    ax.set_ylim(bottom=10)  # a log axis starts at the smallest bar otherwise, which then looks empty
    ax.set_ylabel("frames / s, one learner")
    m = report["model"]
    ax.set_title(
        f"{m['layers']}x{m['hidden']} BLSTM, {m['pdfs']} pdfs, "
        f"{report['batch']['samples']} samples on {report['device']}"
    )
    ax.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.bench model", description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", default="swb2000_hybrid_adpsgd", help="a hybrid preset (default %(default)s)")
    parser.add_argument("--pdfs", type=int, default=32000, help="output layer size (default %(default)s)")
    parser.add_argument("--batch-samples", type=int, default=128, help="21-frame samples a step (default %(default)s)")
    parser.add_argument("--precisions", default="fp32,bf16", help="comma-separated (default %(default)s)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per precision (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (default %(default)s)")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda (default %(default)s)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--out", type=Path, default=Path("exp/bench"))
    args = parser.parse_args(argv)
    log_to_stderr()
    start = time.time()
    try:
        report = run(args)
    except InputError as err:
        log.error("%s", err)
        return 2
    report = {
        "benchmark": "model",
        "settings": settings(args),
        "machine": machine(torch=torch.__version__, torch_threads=torch.get_num_threads()),
        "seconds": round(time.time() - start, 1),
    } | report
    write_report(report, args.out, "model", plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
