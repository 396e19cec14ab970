"""Speed perturbation of a Kaldi data dir, as Kaldi's utils/data/perturb_data_dir_speed.sh.

For a factor f (0.9, 1.1) the copy has every utterance, speaker and recording id prefixed
with `sp<f>-`, segment times and durations divided by f (segments shorter than 10 ms
dropped), the same transcripts, and wav.scp entries that pipe the audio through
`sox -t wav - -t wav - speed f`. The audio reader (asr.data.audio) runs that sox stage
natively (resampling in Python), so sox need not be installed; Kaldi runs it with sox.

    python -m asr.data.perturb data/train [--factors 0.9 1.0 1.1] [--out data/train_sp]

writes data/train_sp0.9, data/train_sp1.1 and their union with the original, data/train_sp
(the factor 1.0 copy keeps the original ids, as Kaldi's perturb_data_dir_speed_3way.sh).
Then the stage record `data/train_sp/perturb.record.json` (asr/utils/record.py): the factors,
the source dir's tables and the combined dir's files; a run whose record matches does nothing.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np

from asr.data.datadir import DataDir, read_data_dir, write_data_dir
from asr.kaldi.segments import Segment
from asr.kaldi.table import write_table
from asr.utils.errors import InputError
from asr.utils.log import log_to_stderr
from asr.utils.record import outputs_of, record_path, why_rerun, write_record

log = logging.getLogger("asr.data.perturb")

MIN_SEGMENT_S = 0.01  # perturb_data_dir_speed.sh keeps a segment only if end > start + 0.01
_SOX_AFTER_PIPE = re.compile(
    r"^(?P<inner>.*\|)\s*sox\s+-t\s+wav\s+-\s+-t\s+wav\s+-\s+speed\s+(?P<factor>[0-9.]+)\s*\|?\s*$"
)
_SOX_ON_FILE = re.compile(
    r"^sox\s+(?:-t\s+wav\s+)?(?P<inner>\S+)\s+-t\s+wav\s+-\s+speed\s+(?P<factor>[0-9.]+)\s*\|?\s*$"
)


# ---------------------------------------------------------------------- audio


def sox_speed_pipe(command: str) -> tuple[str, float] | None:
    """(inner wav.scp value, factor) when `command` is Kaldi's sox speed-perturbation form:
    `<pipe> | sox -t wav - -t wav - speed F` or `sox -t wav <file> -t wav - speed F`."""
    command = command.strip()
    match = _SOX_AFTER_PIPE.match(command) or _SOX_ON_FILE.match(command)
    if match is None:
        return None
    return match.group("inner").strip(), float(match.group("factor"))


def change_speed(samples: np.ndarray, factor: float) -> np.ndarray:
    """`sox speed factor`: tempo and pitch times `factor`, same sample rate (length / factor).

    The signal is treated as sampled at rate * factor and resampled to the rate with a
    polyphase filter (scipy), as sox's speed effect is its rate effect underneath.
    """
    if factor <= 0:
        raise InputError(f"speed factor {factor} must be positive")
    ratio = Fraction(str(factor)).limit_denominator(1000)
    if ratio == 1:
        return samples
    # Imported here: scipy.signal takes about a second of CPU to import, and every process that
    # reads audio (prepare, validate, features) imports this module but few change speeds.
    import scipy.signal

    return scipy.signal.resample_poly(samples, ratio.denominator, ratio.numerator).astype(samples.dtype, copy=False)


def _perturbed_wav(value: str, factor_text: str) -> str:
    """The wav.scp value Kaldi's script writes for one entry."""
    value = value.strip()
    if value.endswith("|"):
        return f"{value[:-1].rstrip()} | sox -t wav - -t wav - speed {factor_text} |"
    return f"sox -t wav {value} -t wav - speed {factor_text} |"


# ------------------------------------------------------------------- data dirs


def factor_label(factor: float) -> str:
    return f"{factor:g}" if factor != 1.0 else "1.0"


def perturb_data_dir(data: DataDir, factor: float) -> tuple[DataDir, dict[str, str]]:
    """The speed-perturbed copy (ids prefixed sp<f>-) and its utt2uniq (new id -> original)."""
    label = factor_label(factor)
    prefix = f"sp{label}-"
    out = DataDir()
    for utt, spk in data.utt2spk.items():
        if data.segments:
            seg = data.segments[utt]
            start, end = seg.start / factor, seg.end / factor
            if not end > start + MIN_SEGMENT_S:
                continue
            out.segments[prefix + utt] = Segment(prefix + seg.recording, round(start, 2), round(end, 2))
        out.utt2spk[prefix + utt] = prefix + spk
        if utt in data.text:
            out.text[prefix + utt] = data.text[utt]
        if utt in data.utt2dur:
            out.utt2dur[prefix + utt] = data.utt2dur[utt] / factor
    recordings = {s.recording for s in data.segments.values()} if data.segments else set(data.utt2spk)
    out.wav_scp = {prefix + r: _perturbed_wav(v, label) for r, v in data.wav_scp.items() if r in recordings}
    out.reco2file_and_channel = {prefix + r: v for r, v in data.reco2file_and_channel.items() if r in recordings}
    utt2uniq = {new: new[len(prefix) :] for new in out.utt2spk}
    return out, utt2uniq


def combine(parts: list[DataDir]) -> DataDir:
    """The union of data dirs with disjoint ids (Kaldi's combine_data.sh)."""
    out = DataDir()
    for part in parts:
        for table in ("wav_scp", "text", "utt2spk", "segments", "reco2file_and_channel", "utt2dur"):
            getattr(out, table).update(getattr(part, table))
    return out


STAGE, RERUN = "perturb", "python -m asr.data.perturb"
# The source dir's tables the copies are made from (combine() and perturb_data_dir() read them).
SOURCE_TABLES = ("wav.scp", "text", "utt2spk", "segments", "reco2file_and_channel", "utt2dur")


def perturbed_from(src: Path, factors: list[float]) -> tuple[dict, list[Path]]:
    """What the combined dir's record names: the factors and the source dir's tables."""
    return {"factors": [float(f) for f in factors]}, [src / name for name in SOURCE_TABLES if (src / name).is_file()]


def speed_perturb(src: str | Path, factors: list[float], out: str | Path | None = None) -> Path:
    """One data dir per factor other than 1.0 (`<src>_sp<f>`) and their union `out`
    (default `<src>_sp`), with the original's utterances for factor 1.0; nothing when the
    union's record says it was made with these factors from the source dir as it is."""
    src = Path(src)
    out = Path(out) if out is not None else src.with_name(src.name + "_sp")
    reason = why_rerun(out, STAGE, *perturbed_from(src, factors))
    if reason is None:
        log.info("%s: perturbed already (%s), skipping", out, record_path(out, STAGE))
        return out
    log.info("%s: perturbing (%s)", out, reason)
    record_path(out, STAGE).unlink(missing_ok=True)  # no old record vouches for the files about to be replaced
    data = read_data_dir(src)
    if not data.wav_scp:
        raise InputError(f"{src / 'wav.scp'}: missing; speed perturbation needs the audio")
    parts, utt2uniq = [], {}
    for factor in factors:
        if factor == 1.0:
            parts.append(data)
            utt2uniq.update({u: u for u in data.utt2spk})
            continue
        copy, uniq = perturb_data_dir(data, factor)
        target = src.with_name(f"{src.name}_sp{factor_label(factor)}")
        write_data_dir(copy, target)
        write_table(target / "utt2uniq", uniq)
        log.info("%s: speed %s -> %s (%d utterances)", src, factor_label(factor), target, len(copy.utt2spk))
        parts.append(copy)
        utt2uniq.update(uniq)
    combined = combine(parts)
    write_data_dir(combined, out)
    write_table(out / "utt2uniq", utt2uniq)
    write_record(out, STAGE, RERUN, *perturbed_from(src, factors), outputs_of(out))
    log.info(
        "%s: %d utterances at speeds %s -> %s", src, len(combined.utt2spk), " ".join(map(factor_label, factors)), out
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.data.perturb", description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dir", help="Kaldi data dir with wav.scp, e.g. data/train")
    parser.add_argument("--factors", type=float, nargs="+", default=[0.9, 1.0, 1.1])
    parser.add_argument("--out", help="the combined data dir (default: <data_dir>_sp)")
    args = parser.parse_args(argv)
    log_to_stderr()
    try:
        speed_perturb(args.data_dir, args.factors, args.out)
    except InputError as err:
        log.error("%s", err)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
