"""Frame targets for the synthetic corpus without Kaldi: its phone timings as alignments.

    python -m asr.train.phone_ali --ms98-dir corpus/swb_ms98_transcriptions --out exp/phone_ali \\
        data/train data/train_dev [data/train_sp ...]

The synthesiser records where eSpeak NG put every phone (asr/data/synth/phones.py:
`swNNNN{A,B}-ms98-a-phone.text` beside the MS98 transcripts, in recording time). For each
data dir this writes `<out>/<data dir name>/pdf.1.gz`, a Kaldi archive of one phone id per
10 ms feature frame per utterance (what ali-to-pdf writes), and `<out>/phones.txt` (`phone id`
a line, `sil` = 0), the same for every set. Train with

    python -m asr.train experiment=hybrid_ce train.alignments=exp/phone_ali/train/pdf.1.gz \\
        train.dev_alignments=exp/phone_ali/train_dev/pdf.1.gz train.transition_model=none \\
        model.num_pdfs=$(wc -l < exp/phone_ali/phones.txt)

A run whose record (`<out>/phone_ali.record.json`) names the same framing and inputs (each
set's segments and utt2spk, every phone timing file), unchanged, is skipped.

Targets are phones (one state each), not three states per phone: the synthesiser knows where
each phone starts and ends but has no states inside it, and splitting phones into thirds
would invent boundaries the targets then teach as fact.

A frame gets the phone that covers its centre: frame t of an utterance covers samples
[t*shift, t*shift + length) of its segment (Kaldi's snip_edges; without it frames are centred
on t*shift + shift/2), as the filterbank cuts them, so there are exactly as many targets as
feature frames. Where no phone is (eSpeak's pauses, gaps between words, the segment's
margins) the target is `sil`. Speed-perturbed copies (recordings `sp<f>-sw02001-A`, as
asr.data.perturb names them) are read on the original's timeline: the speed change resamples
the recording with a zero-phase filter, so time t there was time t*f in the original.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from fractions import Fraction
from pathlib import Path
from typing import Iterator

import numpy as np

from asr.data.datadir import read_data_dir
from asr.data.synth.phones import SILENCE, SUFFIX, Timeline, read_phone_lines, read_timeline, side_phone_path
from asr.features.logmel.options import FbankOptions, num_frames
from asr.kaldi.table import c_sort_key
from asr.kaldi.alignments import write_int_vector_archive
from asr.utils.atomic import write_text
from asr.utils.errors import InputError
from asr.utils.log import log_to_stderr
from asr.utils.record import why_rerun, write_record

log = logging.getLogger("asr.train.phone_ali")

SPEED_PREFIX = re.compile(r"^sp(?P<factor>[0-9.]+)-(?P<recording>.+)$")
SWB_SIDE = re.compile(r"^sw0\d{4}-[AB]$", re.IGNORECASE)
ARCHIVE = "pdf.1.gz"
PHONES = "phones.txt"
STAGE, RERUN = "phone_ali", "python -m asr.train.phone_ali"
FRAMING = ("sample_frequency", "frame_length_ms", "frame_shift_ms", "snip_edges")  # all the labeller reads


def phone_inventory(ms98_dir: Path) -> dict[str, int]:
    """Every phone of the corpus' phone files, `sil` first, then in C order: one table for all
    sets, so train and dev ids agree however they are split."""
    files = sorted(ms98_dir.glob(f"*/*/*{SUFFIX}"))
    if not files:
        raise InputError(
            f"{ms98_dir}: no */*/*{SUFFIX} phone timings; point --ms98-dir at the synthetic corpus' "
            "swb_ms98_transcriptions (python -m asr.data.synth synth.force=true rebuilds an older corpus)"
        )
    phones = {phone for path in files for _, _, phone in read_phone_lines(path)}
    phones.discard(SILENCE)
    return {SILENCE: 0, **{p: i for i, p in enumerate(sorted(phones, key=c_sort_key), 1)}}


def speed_and_side(recording: str) -> tuple[float, str]:
    """(speed factor, Switchboard side) of a recording id such as sp0.9-sw02001-A."""
    factor, side = 1.0, recording
    match = SPEED_PREFIX.match(recording)
    if match:
        factor, side = float(Fraction(match.group("factor")).limit_denominator(1000)), match.group("recording")
    if not SWB_SIDE.match(side):
        raise InputError(
            f"recording {recording!r}: only the synthetic Switchboard-1 sides (sw0NNNN-A/B, "
            "speed-perturbed sp<f>-sw0NNNN-A/B) have phone timings"
        )
    return factor, side


class FrameLabeller:
    """Phone ids per feature frame of a segment, one recording's timeline held at a time."""

    def __init__(self, ms98_dir: Path, phone_ids: dict[str, int], opts: FbankOptions):
        self.ms98_dir, self.phone_ids, self.opts = ms98_dir, phone_ids, opts
        self._side: str | None = None
        self._timeline: Timeline | None = None
        self._ids = np.zeros(0, np.int32)

    def _load(self, side: str) -> None:
        if side != self._side:
            path = side_phone_path(self.ms98_dir, side)
            self._timeline = read_timeline(path)
            unknown = sorted(set(self._timeline.phones) - set(self.phone_ids))
            if unknown:
                raise InputError(f"{path}: phones {unknown} are not in the inventory; rerun over the whole corpus")
            self._ids = np.array(
                [self.phone_ids[p] for p in self._timeline.phones] + [self.phone_ids[SILENCE]], np.int32
            )
            self._side = side

    def frame_centres(self, start: float, end: float) -> np.ndarray:
        """Centres (seconds on the segment's recording) of the frames the filterbank cuts from
        the samples [round(start * rate), round(end * rate)), as asr.data.audio reads them."""
        rate, length, shift = self.opts.sample_frequency, self.opts.window_length, self.opts.window_shift
        first = int(round(start * rate))
        count = num_frames(int(round(end * rate)) - first, self.opts)
        centre = length / 2 if self.opts.snip_edges else shift / 2
        return (first + np.arange(count) * shift + centre) / rate

    def at(self, side: str, seconds: np.ndarray) -> np.ndarray:
        """Phone ids at these times of a Switchboard side (sw02001-A)."""
        self._load(side)
        assert self._timeline is not None
        return self._ids[self._timeline.at(seconds)]  # -1 (silence) picks the last: sil

    def __call__(self, recording: str, start: float, end: float) -> np.ndarray:
        factor, side = speed_and_side(recording)
        return self.at(side, self.frame_centres(start, end) * factor)


def alignments(data_dir: Path, labeller: FrameLabeller) -> Iterator[tuple[str, np.ndarray]]:
    data = read_data_dir(data_dir, tables=("utt2spk", "segments"))
    if not data.segments:
        raise InputError(f"{data_dir / 'segments'}: missing or empty; phone targets need each utterance's segment")
    # by utterance id, so that each recording's utterances come together
    for utt in sorted(data.segments, key=c_sort_key):
        segment = data.segments[utt]
        yield utt, labeller(segment.recording, segment.start, segment.end)


def made_from(ms98_dir: Path, data_dirs: list[Path], opts: FbankOptions) -> tuple[dict, list[Path]]:
    """What `<out>/phone_ali.record.json` names: the framing as options, each set's segments and
    utt2spk and every phone timing file as inputs (other sets are other inputs)."""
    options = {key: getattr(opts, key) for key in FRAMING}
    tables = [d / name for d in data_dirs for name in ("segments", "utt2spk")]
    return options, [p for p in tables if p.is_file()] + sorted(ms98_dir.glob(f"*/*/*{SUFFIX}"))


def write_phone_alignments(ms98_dir: Path, data_dirs: list[Path], out: Path, opts: FbankOptions) -> dict[str, int]:
    """`<out>/phones.txt` and `<out>/<set>/pdf.1.gz` per data dir; returns utterances per set."""
    names = [d.name for d in data_dirs]
    if len(set(names)) != len(names):
        raise InputError(
            f"data dirs {[str(d) for d in data_dirs]}: their names must differ (each becomes <out>/<name>/)"
        )
    phone_ids = phone_inventory(ms98_dir)
    labeller = FrameLabeller(ms98_dir, phone_ids, opts)
    written = {}
    for data_dir in data_dirs:
        written[data_dir.name] = write_int_vector_archive(out / data_dir.name / ARCHIVE, alignments(data_dir, labeller))
        log.info("%s: %d utterances -> %s", data_dir, written[data_dir.name], out / data_dir.name / ARCHIVE)
    write_text(out / PHONES, "".join(f"{p} {i}\n" for p, i in phone_ids.items()))
    log.info("%s: %d phones (model.num_pdfs=%d)", out / PHONES, len(phone_ids), len(phone_ids))
    outputs = {f"{name}/{ARCHIVE}": True for name in written} | {PHONES: True}
    write_record(out, STAGE, RERUN, *made_from(ms98_dir, data_dirs, opts), outputs)
    return written


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r}: true or false")
    return text.lower() == "true"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.train.phone_ali", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "data_dirs",
        nargs="+",
        type=Path,
        help="Kaldi data dirs of the synthetic corpus, e.g. data/train data/train_dev",
    )
    parser.add_argument(
        "--ms98-dir", type=Path, required=True, help="the corpus' swb_ms98_transcriptions (with the -phone.text files)"
    )
    parser.add_argument("--out", type=Path, required=True, help="e.g. exp/phone_ali")
    parser.add_argument("--sample-frequency", type=float, default=8000.0, help="Hz (default 8000, the corpus')")
    parser.add_argument("--frame-length-ms", type=float, help="as features.frame_length_ms (default: Kaldi's)")
    parser.add_argument("--frame-shift-ms", type=float, help="as features.frame_shift_ms (default: Kaldi's)")
    parser.add_argument("--snip-edges", type=_bool, help="as features.snip_edges (default: Kaldi's, true)")
    args = parser.parse_args(argv)
    log_to_stderr()
    framing = {
        "frame_length_ms": args.frame_length_ms,
        "frame_shift_ms": args.frame_shift_ms,
        "snip_edges": args.snip_edges,
    }
    try:
        opts = FbankOptions(
            sample_frequency=args.sample_frequency,
            **{key: value for key, value in framing.items() if value is not None},
        )
        reason = why_rerun(args.out, STAGE, *made_from(args.ms98_dir, list(args.data_dirs), opts))
        if reason is None:
            log.info("%s: done already (%s), skipping", args.out, args.out / f"{STAGE}.record.json")
            return 0
        log.info("%s: %s", args.out, reason)
        write_phone_alignments(args.ms98_dir, list(args.data_dirs), args.out, opts)
    except InputError as err:
        log.error("%s", err)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
