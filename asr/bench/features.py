"""Benchmark of the feature recipes: seconds of compute per hour of audio and real-time factor,
side by side with kaldi-native-fbank (k2-fsa's C++ port of Kaldi's fbank) in the same run.

    python -m asr.bench features [--data-dir DIR] [--minutes M] [--threads N] [--out FILE]

Audio: a Kaldi data dir (e.g. recipes/mini/data/eval2000), or by default a synthetic one of
`--minutes` of voiced, speech-like signal from 8 speakers (WAV files in a temporary dir).

Measured, all on `--threads` CPU threads (torch) and one process:
  reference_fbank   kaldi-native-fbank on every segment (80 bins; audio already in memory)
  fbank             ours on the same segments (80 bins; audio in memory, batched as the driver does),
                    in float64 up to the log (the default: the same bits on every CPU)
  fbank_float32     the same computed in float32 (last digits depend on the CPU's kernels)
  recipes           each conf/features recipe end to end through the stage's own code (reading
                    audio, writing ark/scp and CMVN stats); for the fMLLR and i-vector recipes
                    the one-off training of their models on the same set (GMM/LDA+MLLT+SAT;
                    PCA, diagonal and full UBM, extractor) is timed apart (`model_training`,
                    and `with_model_training`), the adaptation of the set (fMLLR per speaker,
                    online i-vectors per utterance: what test audio costs) is included; the
                    i-vector recipes also time per-speaker extraction (`speaker_ivectors`, as
                    for a training set); `feats_mb_per_hour` is the set's feats.ark per hour
                    of audio as stored (features.compress, deltas appended by the reader).
  compression       log-mel 40 with deltas stored compressed and as float32: the bytes per frame
                    of each, and how far what the reader returns (normalised, deltas appended)
                    differs, in the static and the delta columns (RMS and largest, in units of
                    each column's standard deviation).
Wall and CPU seconds are both reported: on a shared machine CPU time is the stable measure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from asr.data.audio import RecordingCache, cut_segment
from asr.data.datadir import DataDir, read_data_dir, write_data_dir
from asr.features.featureset import FeatureReader
from asr.features.fmllr.recipe import adapt_set, ensure_model
from asr.features.ivector.recipe import ensure_extractor, extract_ivector_set
from asr.features.logmel.extract import compute_features, extract_set
from asr.features.logmel.fbank import INT16_SCALE
from asr.features.logmel.options import FbankOptions
from asr.features.recipes import feature_dim
from asr.kaldi.segments import Segment
from asr.utils.atomic import write_text
from asr.utils.device import cpu_name
from asr.utils.log import log_to_stderr
from asr.utils.threads import torch_threads

log = logging.getLogger("asr.bench.features")

RECIPES = (
    "logmel80",
    "logmel40_deltas",
    "fmllr40",
    "fmllr40_logmel40_deltas",
    "ivector100",
    "fmllr40_ivector100_logmel40_deltas",
)
RATE = 8000


# ------------------------------------------------------------------------ audio


def synthetic_data_dir(root: Path, minutes: float, speakers: int = 8, seed: int = 0) -> Path:
    """Voiced, speech-like audio: a harmonic source with a wandering pitch through two
    resonances, syllable-rate amplitude modulation and a noise floor, per speaker its own
    pitch and spectral colour; one recording per speaker cut into 2-6 s segments."""
    rng = np.random.default_rng(seed)
    data = DataDir()
    seconds = minutes * 60 / speakers
    for s in range(speakers):
        t = np.arange(int(seconds * RATE)) / RATE
        f0 = rng.uniform(90, 220) * (1 + 0.1 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6)))
        phase = 2 * np.pi * np.cumsum(f0) / RATE
        formants = rng.uniform([400, 1200], [900, 2500])
        source = sum(
            np.sin(k * phase)
            / k
            * (1 + 2 * np.exp(-(((k * f0 - formants[0]) / 150) ** 2)) + np.exp(-(((k * f0 - formants[1]) / 250) ** 2)))
            for k in range(1, 25)
        )
        envelope = np.clip(np.sin(2 * np.pi * 4 * t + rng.uniform(0, 6)), 0, None) ** 0.5
        audio = 0.05 * source * envelope + 0.003 * rng.standard_normal(len(t))
        name = f"spk{s:02d}"
        path = root / f"{name}.wav"
        sf.write(path, (audio / max(1.0, np.abs(audio).max() * 1.1)).astype(np.float32), RATE, subtype="PCM_16")
        data.wav_scp[name] = str(path)
        start = 0.0
        while start + 2.0 < seconds:
            end = min(seconds, start + rng.uniform(2.0, 6.0))
            utt = f"{name}_{int(start * 100):06d}-{int(end * 100):06d}"
            data.segments[utt] = Segment(name, round(start, 2), round(end, 2))
            data.utt2spk[utt] = name
            data.text[utt] = "x"
            start = end + 0.1
    return write_data_dir(data, root / "data")


def load_segments(data_dir: Path) -> tuple[list[np.ndarray], float]:
    """Every segment's samples (in memory) and the total seconds."""
    data = read_data_dir(data_dir)
    audio = RecordingCache(data.wav_scp)
    waves = []
    for utt in data.utts:
        if data.segments:
            seg = data.segments[utt]
            samples, rate = audio.get(seg.recording)
            waves.append(cut_segment(samples, rate, seg.start, seg.end, utt))
        else:
            waves.append(audio.get(utt)[0])
    return waves, sum(len(w) for w in waves) / RATE


# ------------------------------------------------------------------------ timing


@dataclass
class Timing:
    """Wall and CPU seconds. CPU time is what a recipe costs on a machine shared with other
    work (wall time there includes waiting for a core); the two agree on an idle machine."""

    wall: float = 0.0
    cpu: float = 0.0

    def __add__(self, other: "Timing") -> "Timing":
        return Timing(self.wall + other.wall, self.cpu + other.cpu)


@contextlib.contextmanager
def timed(into: list[Timing]):
    wall, cpu = time.perf_counter(), time.process_time()
    yield
    into.append(Timing(time.perf_counter() - wall, time.process_time() - cpu))


def rates(timing: Timing, audio_seconds: float) -> dict:
    hours = audio_seconds / 3600
    return {
        "seconds": round(timing.wall, 3),
        "cpu_seconds": round(timing.cpu, 3),
        "seconds_per_hour": round(timing.wall / hours, 2),
        "cpu_seconds_per_hour": round(timing.cpu / hours, 2),
        "rtf": round(timing.wall / audio_seconds, 5),
        "cpu_rtf": round(timing.cpu / audio_seconds, 5),
    }


def time_reference_fbank(waves: list[np.ndarray]) -> Timing:
    import kaldi_native_fbank as knf

    opts = knf.FbankOptions()
    opts.frame_opts.samp_freq, opts.frame_opts.dither, opts.mel_opts.num_bins = RATE, 0.0, 80
    timings: list[Timing] = []
    with timed(timings):
        for wave in waves:
            fbank = knf.OnlineFbank(opts)
            fbank.accept_waveform(RATE, wave * INT16_SCALE)
            fbank.input_finished()
            np.array([fbank.get_frame(i) for i in range(fbank.num_frames_ready)])
    return timings[0]


def time_our_fbank(waves: list[np.ndarray], compute_dtype: torch.dtype = torch.float64) -> Timing:
    options = FbankOptions(sample_frequency=RATE, num_mel_bins=80)
    compute_features(waves[:4], options, compute_dtype=compute_dtype)  # warm-up (mel matrix, window cache)
    timings: list[Timing] = []
    with timed(timings):
        compute_features(waves, options, compute_dtype=compute_dtype)
    return timings[0]


def time_recipe(name: str, data_dir: Path, work: Path, overrides: list[str], audio_seconds: float) -> dict:
    """One recipe end to end on the set, through the stage's code, in a fresh directory."""
    from asr.config import load_config

    fcfg = load_config([f"features={name}", "features.jobs=1", *overrides]).features
    options = FbankOptions.from_config(fcfg)
    out = work / name
    result: dict = {"feat_dim": feature_dim(fcfg)}
    timings: list[Timing] = []
    if fcfg.kind == "fbank":
        with timed(timings):
            extract_set(
                data_dir,
                out / "set",
                options,
                cmvn_unit=fcfg.cmvn,
                jobs=1,
                deltas=(fcfg.delta_order, fcfg.delta_window),
                compress=fcfg.compress,
            )
        return (
            result | rates(timings[0], audio_seconds) | {"feats_mb_per_hour": mb_per_hour(out / "set", audio_seconds)}
        )
    with timed(timings):
        extract_set(data_dir, out / "fbank", options, cmvn_unit="speaker", jobs=1, compress=fcfg.compress)
    fbank = timings[-1]
    training, adaptation = Timing(), Timing()
    if fcfg.kind in ("fmllr", "fmllr_fbank", "fmllr_ivector_fbank"):
        with timed(timings):
            ensure_model(out / "gmm", out / "fbank", data_dir, fcfg)
        training += timings[-1]
    ivector_dir = None
    if fcfg.kind in ("ivector", "fmllr_ivector_fbank"):
        with timed(timings):
            ensure_extractor(out / "extractor", out / "fbank", data_dir, fcfg)
        training += timings[-1]
        write_feats = fcfg.kind == "ivector"
        ivector_dir = out / ("set" if write_feats else "ivector")
        with timed(timings):
            extract_ivector_set(out / "extractor", out / "fbank", data_dir, ivector_dir, fcfg, "online", write_feats)
        adaptation += timings[-1]
        with timed(timings):
            extract_ivector_set(out / "extractor", out / "fbank", data_dir, out / "speaker", fcfg, "speaker", False)
        result["speaker_ivectors"] = rates(timings[-1], audio_seconds)
    if fcfg.kind != "ivector":
        with timed(timings):
            adapt_set(out / "gmm", out / "fbank", data_dir, out / "set", fcfg, ivector_dir)
        adaptation += timings[-1]
    result |= rates(fbank + adaptation, audio_seconds)
    result["model_training"] = {"seconds": round(training.wall, 3), "cpu_seconds": round(training.cpu, 3)}
    result["adaptation"] = {"seconds": round(adaptation.wall, 3), "cpu_seconds": round(adaptation.cpu, 3)}
    result["with_model_training"] = rates(fbank + training + adaptation, audio_seconds)
    result["feats_mb_per_hour"] = mb_per_hour(out / "set", audio_seconds)
    return result


def mb_per_hour(set_dir: Path, audio_seconds: float) -> float:
    return round((set_dir / "feats.ark").stat().st_size / 2**20 / (audio_seconds / 3600), 2)


def compression_error(data_dir: Path, work: Path) -> dict:
    """Log-mel 40 with deltas, per-utterance CMVN, stored both ways; the reader's outputs compared."""
    options = FbankOptions(sample_frequency=8000.0, num_mel_bins=40)
    utt2spk = read_data_dir(data_dir, tables=()).utt2spk
    readers = {}
    for compress in (False, True):
        out = work / f"compress_{compress}"
        extract_set(data_dir, out, options, cmvn_unit="utterance", jobs=1, deltas=(2, 2), compress=compress)
        readers[compress] = FeatureReader(out, utt2spk)
    utts = readers[False].utts()
    errors = np.concatenate([(readers[True](u) - readers[False](u)).numpy() for u in utts])
    static, deltas = np.abs(errors[:, :40]), np.abs(errors[:, 40:])
    frames = sum(readers[False].num_frames[u] for u in utts)
    return {
        "recipe": "logmel40_deltas",
        "utterances": len(utts),
        "frames": frames,
        "bytes_per_frame": {
            name: round((readers[compress].set_dir / "feats.ark").stat().st_size / frames, 1)
            for name, compress in (("float32", False), ("compressed", True))
        },
        "static_rms_error": round(float(np.sqrt((static**2).mean())), 5),
        "static_max_error": round(float(static.max()), 4),
        "delta_rms_error": round(float(np.sqrt((deltas**2).mean())), 5),
        "delta_max_error": round(float(deltas.max()), 4),
    }


def run(data_dir: Path | None, minutes: float, threads: int, overrides: list[str]) -> dict:
    with torch_threads(threads):
        return _run(data_dir, minutes, threads, overrides)


def _run(data_dir: Path | None, minutes: float, threads: int, overrides: list[str]) -> dict:
    synthetic = data_dir is None
    with tempfile.TemporaryDirectory(prefix="bench_features_") as tmp:
        work = Path(tmp)
        if data_dir is None:
            data_dir = synthetic_data_dir(work, minutes)
        waves, audio_seconds = load_segments(data_dir)
        log.info("%d segments, %.1f s of audio from %s", len(waves), audio_seconds, data_dir)
        reference = time_reference_fbank(waves)
        ours = time_our_fbank(waves)
        ours_float32 = time_our_fbank(waves, torch.float32)
        recipes = {name: time_recipe(name, data_dir, work, overrides, audio_seconds) for name in RECIPES}
        compression = compression_error(data_dir, work)
    return {
        "benchmark": "features",
        "audio": {
            "data_dir": "synthetic" if synthetic else str(data_dir),
            "seconds": round(audio_seconds, 1),
            "segments": len(waves),
        },
        "machine": {
            "cpu": cpu_name(),
            "cores": os.cpu_count(),
            "load_average_1min": round(os.getloadavg()[0], 2),
            "torch_threads": threads,
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
        "reference_fbank": {"implementation": "kaldi-native-fbank", "num_mel_bins": 80}
        | rates(reference, audio_seconds),
        "fbank": {"implementation": "asr.features.logmel.fbank", "num_mel_bins": 80} | rates(ours, audio_seconds),
        "fbank_float32": {"implementation": "asr.features.logmel.fbank, float32 spectrum", "num_mel_bins": 80}
        | rates(ours_float32, audio_seconds),
        "fbank_speedup_vs_reference": {
            "wall": round(reference.wall / ours.wall, 2),
            "cpu": round(reference.cpu / ours.cpu, 2),
        },
        "fbank_float64_cost": {
            "wall": round(ours.wall / ours_float32.wall, 2),
            "cpu": round(ours.cpu / ours_float32.cpu, 2),
        },
        "recipes": recipes,
        "compression": compression,
        "overrides": overrides,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.bench features", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, help="a Kaldi data dir at 8 kHz (default: synthetic audio)")
    parser.add_argument("--minutes", type=float, default=10.0, help="synthetic audio to generate (default %(default)s)")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (default %(default)s, like the reference)"
    )
    parser.add_argument("--out", type=Path, default=Path("exp/bench/features.json"))
    parser.add_argument(
        "overrides",
        nargs="*",
        help="features.* overrides for every recipe (e.g. features.fmllr.*, features.ivector.*), key=value",
    )
    args = parser.parse_args(argv)
    log_to_stderr()
    result = run(args.data_dir, args.minutes, args.threads, args.overrides)
    text = json.dumps(result, indent=1)
    write_text(args.out, text + "\n")
    print(text)
    log.info("written to %s", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
