"""One utterance from tokens to telephone-rate audio, with the time of every token in it.

eSpeak speaks the utterance's words in one go (natural prosody) and reports where each word
starts. The audio is cut at those points into per-word pieces, which are then put back
together with the edits spontaneous speech needs: a cut-off word keeps only its first part,
a laughed word gets a tremolo, and noises or laughs are spliced in between words. Each token's
time is where its sound actually is in the result (its active, non-silent span).

Phones follow the same edits: eSpeak's phoneme events give each phone's span in its output,
and the spans are cut and moved with the samples they cover (a cut-off word keeps the phones
of its first part, spliced sounds get `[noise]` or `[laughter]`), so they stay exact to the
sample at 8 kHz.

eSpeak sometimes speaks two short words as one unit and reports only the first ("has been",
"in the"). Such a group is split in proportion to the words' letters, at the quietest point
near that proportion.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

import numpy as np

from asr.data.synth import sounds
from asr.data.synth import tokens as tk
from asr.data.synth.channel import RATE, db_to_amplitude, phone_position, to_phone_rate
from asr.data.synth.espeak import Espeak, Synthesis
from asr.data.synth.phones import LAUGHTER, NOISE, PhoneSpan, speech_phones, with_prepauses
from asr.data.synth.speakers import Speaker

SPEECH_DB = -20.0  # speech RMS in dBFS before the speaker's own gain
MARGIN = int(0.03 * RATE)  # silence kept around an utterance
ACTIVE_BELOW_PEAK_DB = 40.0  # quieter than this (relative to the loudest 10 ms) is silence
POWER_WINDOW = int(0.01 * RATE)
SNAP_WINDOW = int(0.03 * RATE)


@dataclass(frozen=True)
class TimedToken:
    token: tk.Token
    start: int  # samples at RATE; for marks start == end
    end: int

    def shifted(self, offset: int) -> "TimedToken":
        return replace(self, start=self.start + offset, end=self.end + offset)


@dataclass(frozen=True)
class Utterance:
    audio: np.ndarray  # float32 at RATE
    tokens: tuple[TimedToken, ...]  # times relative to the start of `audio`
    phones: tuple[PhoneSpan, ...] = ()  # likewise; silence is where no phone is


def smoothed_power(x: np.ndarray, window: int = POWER_WINDOW) -> np.ndarray:
    """Mean square over a centred window, per sample."""
    squares = np.concatenate([[0.0], np.cumsum(x.astype(np.float64) ** 2)])
    half = window // 2
    hi = np.minimum(np.arange(len(x)) + half + 1, len(x))
    lo = np.maximum(np.arange(len(x)) - half, 0)
    return (squares[hi] - squares[lo]) / (hi - lo)


def _active_span(active: np.ndarray, lo: int, hi: int) -> tuple[int, int]:
    """First and last+1 active sample in [lo, hi); the whole range if none is active."""
    idx = np.flatnonzero(active[lo:hi])
    if len(idx) == 0:
        return lo, hi
    return lo + int(idx[0]), lo + int(idx[-1]) + 1


def _spoken_text(spoken: list[tk.Token], question: bool) -> tuple[str, list[int]]:
    offsets, parts, at = [], [], 0
    for token in spoken:
        offsets.append(at)
        parts.append(token.spoken)
        at += len(token.spoken) + 1
    return " ".join(parts) + ("?" if question else "."), offsets


def _word_starts(synthesis: Synthesis, offsets: list[int]) -> list[int | None]:
    """Start sample (at eSpeak's rate) of each spoken word; None where eSpeak merged it."""
    starts: list[int | None] = [None] * len(offsets)
    starts[0] = last = 0
    for event in synthesis.words:
        k = bisect.bisect_right(offsets, event.char_offset) - 1
        if k > 0 and starts[k] is None and event.sample > last:  # a word needs some length
            starts[k] = last = event.sample
    return starts


def _split_group(power: np.ndarray, lo: int, hi: int, lengths: list[int]) -> list[int]:
    """Boundaries inside [lo, hi) for words of these letter counts, snapped to quiet points."""
    total = sum(lengths)
    bounds, cumulative = [], 0
    for length in lengths[:-1]:
        cumulative += length
        guess = lo + (hi - lo) * cumulative // total
        a = max(lo + 1, guess - SNAP_WINDOW, bounds[-1] + 1 if bounds else lo + 1)
        b = min(hi - 1, guess + SNAP_WINDOW)
        bounds.append(a + int(np.argmin(power[a:b])) if b > a else max(a, min(guess, hi - 1)))
    return bounds


def word_bounds(
    synthesis: Synthesis, offsets: list[int], lengths: list[int], speech: np.ndarray, power: np.ndarray
) -> list[int]:
    """Start of each spoken word in `speech` (8 kHz), plus len(speech) at the end."""
    starts = _word_starts(synthesis, offsets)
    known = [i for i, s in enumerate(starts) if s is not None]
    bounds: list[int] = [0] * len(starts)
    for j, i in enumerate(known):
        lo = phone_position(starts[i], synthesis.rate)  # type: ignore[arg-type]
        nxt = known[j + 1] if j + 1 < len(known) else len(starts)
        hi = phone_position(starts[nxt], synthesis.rate) if nxt < len(starts) else len(speech)  # type: ignore[arg-type]
        lo, hi = min(lo, len(speech)), min(max(hi, lo), len(speech))
        bounds[i] = lo
        if nxt - i > 1:
            hi = min(len(speech), max(hi, lo + nxt - i + 1))
            bounds[i + 1 : nxt] = _split_group(power, lo, hi, lengths[i:nxt])
    return bounds + [len(speech)]


def _silence(seconds: float) -> np.ndarray:
    return np.zeros(int(round(seconds * RATE)), np.float32)


def _fade_out(x: np.ndarray) -> np.ndarray:
    n = min(len(x), int(0.008 * RATE))
    y = x.copy()
    if n:
        y[-n:] *= np.linspace(1.0, 0.0, n, dtype=np.float32)
    return y


class _PlacedPhones:
    """The phones of an utterance as its pieces are put together."""

    def __init__(self, spans: list[PhoneSpan]):
        self.spans = spans  # in the 8 kHz speech as eSpeak spoke it
        self._ends = [span.end for span in spans]  # in time order, for finding a piece's first phone
        self.placed: list[PhoneSpan] = []
        self._last_source = -1  # which speech phone placed[-1] comes from, if any

    def speech(self, lo: int, hi: int, at: int) -> None:
        """Speech samples [lo, hi) were placed at `at`: their phones (or parts) go with them."""
        for i in range(bisect.bisect_right(self._ends, lo), len(self.spans)):
            span = self.spans[i]
            if span.start >= hi:
                break
            start, end = max(span.start, lo), min(span.end, hi)
            if end <= start:
                continue
            start, end = start - lo + at, end - lo + at
            last = self.placed[-1] if self.placed else None
            if last is not None and i == self._last_source and last.end == start:
                # one phone cut at a word boundary whose two pieces stayed together
                self.placed[-1] = PhoneSpan(last.phone, last.start, end)
            else:
                self.placed.append(PhoneSpan(span.phone, start, end))
            self._last_source = i

    def sound(self, phone: str, at: int, length: int) -> None:
        self.placed.append(PhoneSpan(phone, at, at + length))
        self._last_source = -1


class UtteranceRenderer:
    """Renders utterances for one speaker; all randomness comes from `rng`."""

    def __init__(self, speaker: Speaker, rng: np.random.Generator, engine: Espeak | None = None):
        self.speaker = speaker
        self.rng = rng
        self.engine = engine
        self.level = db_to_amplitude(SPEECH_DB + speaker.gain_db)
        base_f0 = 115.0 if speaker.gender == "M" else 205.0
        self.laugh_f0 = base_f0 * (0.8 + 0.4 * speaker.pitch / 100.0)

    def _speak(
        self, spoken: list[tk.Token], question: bool
    ) -> tuple[np.ndarray, list[int], np.ndarray, list[PhoneSpan]]:
        engine = self.engine or Espeak.instance()
        text, offsets = _spoken_text(spoken, question)
        s = self.speaker
        synthesis = engine.synthesize(text, s.voice, s.rate, s.pitch, s.intonation, seed=int(self.rng.integers(2**31)))
        speech = to_phone_rate(synthesis.samples / 32768.0, synthesis.rate)
        power = smoothed_power(speech)
        active = power > power.max() * 10 ** (-ACTIVE_BELOW_PEAK_DB / 10)
        rms = float(np.sqrt(np.mean(speech[active].astype(np.float64) ** 2))) if active.any() else 1.0
        speech = (speech * (self.level / rms)).astype(np.float32)
        bounds = word_bounds(synthesis, offsets, [len(t.spoken) for t in spoken], speech, power)
        names = [p.name for p in synthesis.phonemes]
        starts = with_prepauses(synthesis.samples, [p.sample for p in synthesis.phonemes], names)
        phones = speech_phones([phone_position(start, synthesis.rate) for start in starts], names, len(speech))
        return speech, bounds, active, phones

    def _event(self, token: tk.Token) -> np.ndarray:
        if token.ms98 == tk.LAUGHTER:
            return sounds.laughter(self.rng, RATE, self.laugh_f0, self.level * db_to_amplitude(-3.0))
        return sounds.noise_burst(self.rng, RATE, self.level * db_to_amplitude(-self.rng.uniform(4.0, 12.0)))

    def render(self, tokens: list[tk.Token], question: bool = False) -> Utterance:
        spoken = [t for t in tokens if t.spoken]
        if spoken:
            speech, bounds, active, speech_spans = self._speak(spoken, question)
        chunks: list[np.ndarray] = []
        timed: list[TimedToken] = []
        phones = _PlacedPhones(speech_spans if spoken else [])
        pos = 0
        k = 0  # index of the next spoken word
        for i, token in enumerate(tokens):
            if token.kind == tk.MARK:
                timed.append(TimedToken(token, pos, pos))
                continue
            if not token.spoken:
                lead = _silence(self.rng.uniform(0.08, 0.2)) if chunks else np.zeros(MARGIN, np.float32)
                sound = self._event(token)
                tail = _silence(self.rng.uniform(0.08, 0.2))  # trimmed if nothing follows
                timed.append(TimedToken(token, pos + len(lead), pos + len(lead) + len(sound)))
                phones.sound(LAUGHTER if token.ms98 == tk.LAUGHTER else NOISE, pos + len(lead), len(sound))
                chunks += [lead, sound, tail]
                pos += len(lead) + len(sound) + len(tail)
                continue
            lo, hi = bounds[k], bounds[k + 1]
            a, e = _active_span(active, lo, hi)
            if not chunks:  # the utterance opens with this word: keep a margin of silence
                piece_start = max(0, a - MARGIN)
                lead = np.zeros(MARGIN - (a - piece_start), np.float32)
                chunks.append(lead)
                pos += len(lead)
            else:
                piece_start = lo
            if token.cut < 1.0:
                keep = a + max(int(0.06 * RATE), int(token.cut * (e - a)))
                piece = _fade_out(speech[piece_start : min(keep, hi)])
                phones.speech(piece_start, min(keep, hi), pos)
                word_end = pos + len(piece)
                piece = np.concatenate([piece, _silence(self.rng.uniform(0.12, 0.3))])
            else:
                piece = speech[piece_start:hi]
                phones.speech(piece_start, hi, pos)
                if token.kind == tk.LAUGHTER_WORD:
                    piece = sounds.laughing(self.rng, RATE, piece)
                word_end = pos + e - piece_start
            timed.append(TimedToken(token, pos + a - piece_start, word_end))
            chunks.append(piece)
            pos += len(piece)
            k += 1
        return self._trimmed(chunks, timed, phones.placed)

    @staticmethod
    def _trimmed(chunks: list[np.ndarray], timed: list[TimedToken], phones: list[PhoneSpan]) -> Utterance:
        """Cut after the last sound plus a margin (eSpeak's trailing pause, a cut word's gap)."""
        audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
        last = max((t.end for t in timed), default=0)
        end = min(len(audio), last + MARGIN)
        audio = np.concatenate([audio[:end], np.zeros(max(0, last + MARGIN - len(audio)), np.float32)])
        kept = tuple(PhoneSpan(p.phone, p.start, min(p.end, end)) for p in phones if p.start < end)
        return Utterance(audio=audio.astype(np.float32), tokens=tuple(timed), phones=kept)
