"""Phone timings of the synthetic corpus: where eSpeak NG put every phone, on the recording's
own timeline, written beside each side's MS98 transcripts (not part of the real release).

    swb_ms98_transcriptions/NN/NNNN/swNNNN{A,B}-ms98-a-phone.text

One line per phone, in the form of the -word.text files: the MS98 segment it lies in, its
start and end in seconds from the start of the recording (6 decimals: exact at 8 kHz), and the
phone. Phones are eSpeak's mnemonics for the speaker's accent with the stress marks removed
(`'aU` -> `aU`), plus `[noise]` and `[laughter]` for the spliced-in sounds. Whatever no line
covers is silence (`sil`): eSpeak's own pauses, the gaps between words and utterances, the
segments' margins. Only training (Switchboard-1) conversations get these files.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

import numpy as np

from asr.utils.errors import InputError

SILENCE = "sil"
NOISE = "[noise]"
LAUGHTER = "[laughter]"
STRESS_MARKS = "',"  # eSpeak's primary and secondary stress, written before the phoneme
PAUSE_PREFIX = "_"  # eSpeak's pauses (_, _:, _!, ...) are silence
SUFFIX = "-ms98-a-phone.text"


@dataclass(frozen=True)
class PhoneSpan:
    phone: str
    start: int  # samples
    end: int

    def shifted(self, offset: int) -> "PhoneSpan":
        return replace(self, start=self.start + offset, end=self.end + offset)


def phone_name(mnemonic: str) -> str | None:
    """The phone an eSpeak phoneme event names; None for a pause (silence)."""
    name = mnemonic.lstrip(STRESS_MARKS)
    return None if not name or name.startswith(PAUSE_PREFIX) else name


def with_prepauses(samples: np.ndarray, starts: list[int], names: list[str]) -> list[int]:
    """Phoneme starts moved back over the silence eSpeak puts before them.

    eSpeak NG's Generate() emits a phoneme's pre-pause (a stop's closure, a gap at some word
    boundaries) *before* that phoneme's event, so the event marks the release and the silent
    closure would fall to the phone before. The pause is the phoneme's own (p->prepause), so
    its run of zero samples right before the event is given back to it; not when the phone
    before is a pause, which is silence either way.
    """
    sounding = np.flatnonzero(samples)
    moved = list(starts)
    for i in range(1, len(starts)):
        if phone_name(names[i - 1]) is None:
            continue
        # just after the last non-zero sample before the event, but after the previous phone's start
        k = int(np.searchsorted(sounding, starts[i])) - 1
        at = max(int(sounding[k]) + 1 if k >= 0 else 0, starts[i - 1] + 1)
        moved[i] = at if at < starts[i] - 1 else starts[i]  # a lone zero is a zero crossing
    return moved


def speech_phones(starts: list[int], names: list[str], num_samples: int) -> list[PhoneSpan]:
    """Spans from phoneme events (each phoneme lasts until the next event starts, the last one
    until `num_samples`), pauses left out."""
    ends = starts[1:] + [num_samples]
    spans = []
    for mnemonic, start, end in zip(names, starts, ends):
        phone = phone_name(mnemonic)
        start, end = min(start, num_samples), min(end, num_samples)
        if phone is not None and end > start:
            spans.append(PhoneSpan(phone, start, end))
    return spans


def clipped(spans: list[PhoneSpan], lo: int, hi: int, offset: int) -> list[PhoneSpan]:
    """The parts of `spans` inside [lo, hi), moved by `offset`."""
    out = []
    for span in spans:
        start, end = max(span.start, lo), min(span.end, hi)
        if end > start:
            out.append(PhoneSpan(span.phone, start + offset, end + offset))
    return out


def phone_path(ms98_root: Path, number: int, side: str) -> Path:
    """Beside swNNNN{side}-ms98-a-trans.text: <root>/NN/NNNN/swNNNN{side}-ms98-a-phone.text."""
    return ms98_root / f"{number // 100:02d}" / f"{number}" / f"sw{number}{side}{SUFFIX}"


def side_phone_path(ms98_dir: str | Path, side: str) -> Path:
    """The phone file of a Kaldi recording id such as sw02001-A (or SW02001-A)."""
    conv, channel = side.rsplit("-", 1)
    number = int(conv[2:])
    return phone_path(Path(ms98_dir), number, channel.upper())


def phone_line(segment_id: str, span: PhoneSpan, rate: int) -> str:
    return f"{segment_id} {span.start / rate:.6f} {span.end / rate:.6f} {span.phone}"


@dataclass(frozen=True)
class Timeline:
    """A recording's phones in time order: phone p covers [starts[p], ends[p]) seconds."""

    starts: np.ndarray  # float64
    ends: np.ndarray
    phones: list[str]

    def at(self, seconds: np.ndarray) -> np.ndarray:
        """Index into `phones` of the phone covering each time; -1 where silence is."""
        index = np.searchsorted(self.starts, seconds, side="right") - 1
        inside = (index >= 0) & (seconds < self.ends[np.maximum(index, 0)])
        return np.where(inside, index, -1)


def read_phone_lines(path: Path) -> Iterator[tuple[float, float, str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(
            f"{path}: phone timings not found; they come with the synthetic corpus "
            "(python -m asr.data.synth synth.force=true rebuilds an older one)"
        ) from None
    for lineno, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        try:
            _, start, end, phone = fields
            yield float(start), float(end), phone
        except ValueError:
            raise InputError(
                f"{path}:{lineno}: expected '<segment> <start> <end> <phone>', got {line.strip()!r}"
            ) from None


def read_timeline(path: Path) -> Timeline:
    rows = list(read_phone_lines(path))
    starts = np.array([r[0] for r in rows], np.float64)
    ends = np.array([r[1] for r in rows], np.float64)
    if len(rows) and (np.any(ends <= starts) or np.any(starts[1:] < ends[:-1])):
        raise InputError(f"{path}: phones must be in time order, each ending after it starts and before the next")
    return Timeline(starts, ends, [r[2] for r in rows])
