"""A two-sided telephone conversation: who speaks when, and the two channels it produces.

Turns alternate between side A and side B. Between turns there is usually a short pause,
sometimes the next speaker starts before the other has finished (overlap); during a long
utterance the listener often says "uh-huh" or "yeah" over it (a backchannel). Now and then a
side has a sound of its own (a bump, a laugh). Every utterance on a side is one segment, at
least MIN_GAP from the next, so the segment lists of a side never overlap.

A segment is the utterance plus some of the silence around it, as a transcriber marks it
(MS98 and pem boundaries are not cut at the first and last sample of speech). Without that
margin every training segment would start and end on speech, while Kaldi's eval2000 data
prep widens each Hub5 segment by 0.1 s: a model trained on tight segments then meets silent
edges only at test time (measured on the demo: 27.2% greedy WER on the widened eval segments,
14.7% on the same segments left tight, with the model trained on tight ones).

Everything random comes from one generator seeded by the conversation's own seed, so a
conversation is the same whichever process renders it and whatever was rendered before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from asr.data.synth import grammar as gr
from asr.data.synth import tokens as tk
from asr.data.synth.channel import RATE, telephone_line
from asr.data.synth.phones import PhoneSpan
from asr.data.synth.render import TimedToken, Utterance, UtteranceRenderer
from asr.data.synth.speakers import Speaker

SIDES = ("A", "B")
MIN_GAP = int(0.15 * RATE)  # between two utterances of one side
SEGMENT_MARGIN_S = (0.0, 0.3)  # silence a segment keeps before and after its utterance
SEGMENT_APART = int(0.05 * RATE)  # between two segments of one side (keeps 2-decimal times apart)


@dataclass(frozen=True)
class Timing:
    turn_gap: tuple[float, float]  # seconds of silence between turns
    overlap: float  # probability that the next turn starts before this one ends
    overlap_seconds: tuple[float, float]
    pause: tuple[float, float]  # between the utterances of one turn
    backchannel: float  # probability per utterance longer than BACKCHANNEL_MIN_SECONDS
    event: float  # probability per turn of a stand-alone noise or laugh
    noise_floor_db: tuple[float, float]  # line noise, dBFS


@dataclass(frozen=True)
class ConversationStyle:
    text: gr.Style
    timing: Timing


STYLES = {
    "swb": ConversationStyle(
        gr.SWITCHBOARD_STYLE,
        Timing(
            turn_gap=(0.15, 0.9),
            overlap=0.15,
            overlap_seconds=(0.1, 0.5),
            pause=(0.25, 0.7),
            backchannel=0.35,
            event=0.06,
            noise_floor_db=(-64.0, -58.0),
        ),
    ),
    # CallHome: family members, quicker exchanges, more talking over each other, worse lines.
    "callhome": ConversationStyle(
        gr.CALLHOME_STYLE,
        Timing(
            turn_gap=(0.05, 0.6),
            overlap=0.3,
            overlap_seconds=(0.1, 0.6),
            pause=(0.15, 0.5),
            backchannel=0.45,
            event=0.1,
            noise_floor_db=(-54.0, -48.0),
        ),
    ),
}
BACKCHANNEL_MIN_SECONDS = 1.5


@dataclass(frozen=True)
class ConversationSpec:
    """Everything needed to render one conversation, decided before rendering starts."""

    name: str  # sw02001, sw_4390, en_4156
    subset: str  # train, eval_swb, eval_callhome
    speakers: tuple[Speaker, Speaker]  # side A, side B
    topic: str
    seconds: float  # target length; the conversation ends with the turn in progress
    seed: int
    style: str  # key of STYLES
    held_out: bool  # use the evaluation side of the grammar's held-out split


@dataclass(frozen=True)
class Segment:
    """One utterance (or stand-alone sound) on one side; times in samples at RATE."""

    start: int
    end: int
    tokens: tuple[TimedToken, ...]
    phones: tuple[PhoneSpan, ...] = ()  # on the recording's timeline, as the tokens


@dataclass
class Conversation:
    spec: ConversationSpec
    num_samples: int
    segments: dict[str, list[Segment]]  # by side, in time order


@dataclass
class _Track:
    """What one side has said so far."""

    placed: list[tuple[int, Utterance]] = field(default_factory=list)

    @property
    def free_at(self) -> int:
        return self.placed[-1][0] + len(self.placed[-1][1].audio) if self.placed else 0

    def earliest_start(self, at: int) -> int:
        return max(at, self.free_at + MIN_GAP) if self.placed else max(at, 0)

    def place(self, at: int, utterance: Utterance) -> int:
        start = self.earliest_start(at)
        self.placed.append((start, utterance))
        return start


class _Dialogue:
    def __init__(self, spec: ConversationSpec, engine=None):
        self.spec = spec
        self.rng = np.random.default_rng(spec.seed)
        self.style = STYLES[spec.style]
        self.grammar = gr.Grammar(self.rng, spec.topic, spec.held_out)
        self.disfluencies = gr.Disfluencies(self.rng, self.style.text)
        self.renderers = {side: UtteranceRenderer(spk, self.rng, engine) for side, spk in zip(SIDES, spec.speakers)}
        self.tracks = {side: _Track() for side in SIDES}

    def seconds(self, bounds: tuple[float, float]) -> int:
        return int(self.rng.uniform(*bounds) * RATE)

    def _say(self, side: str, sentence: gr.Sentence) -> Utterance:
        tokens = self.disfluencies.apply(sentence)
        if self.rng.random() < self.style.text.aside:
            tokens = self.disfluencies.with_aside(tokens, self.grammar.aside())
        return self.renderers[side].render(tokens, sentence.question)

    def _backchannel(self, listener: str, start: int, end: int) -> None:
        """The listener acknowledges, somewhere in the middle of a long utterance."""
        if end - start < BACKCHANNEL_MIN_SECONDS * RATE or self.rng.random() >= self.style.timing.backchannel:
            return
        at = start + int((end - start) * self.rng.uniform(0.3, 0.75))
        track = self.tracks[listener]
        if track.earliest_start(at) != at:
            return
        sentence = self.grammar.backchannel()
        tokens = gr.plain_tokens(sentence)
        if self.rng.random() < self.style.text.laughter_word and tokens[0].kind == tk.WORD:
            tokens[0] = tk.laughter_word(tokens[0].word)
        track.place(at, self.renderers[listener].render(tokens))

    def _stand_alone_event(self, after: int) -> None:
        side = SIDES[int(self.rng.integers(2))]
        kind = self.rng.random()
        token = tk.laughter() if kind < 0.4 else tk.noise() if kind < 0.8 else tk.vocalized_noise()
        at = after + self.seconds((0.0, 0.4))
        self.tracks[side].place(at, self.renderers[side].render([token]))

    def _turn(self, side: str, at: int, phase: str) -> int:
        """Speak one turn starting at `at`; returns when the next turn starts."""
        listener = SIDES[1 - SIDES.index(side)]
        timing = self.style.timing
        start = end = at
        for sentence in self.grammar.turn(phase):
            utterance = self._say(side, sentence)
            start = self.tracks[side].place(at, utterance)
            end = start + len(utterance.audio)
            self._backchannel(listener, start, end)
            at = end + self.seconds(timing.pause)
        if self.rng.random() < timing.event:
            self._stand_alone_event(end)
        if self.rng.random() < timing.overlap and end - start > RATE:
            return max(start + RATE // 2, end - self.seconds(timing.overlap_seconds))
        return end + self.seconds(timing.turn_gap)

    def run(self) -> int:
        """All turns; returns the length of the recording in samples."""
        target = int(self.spec.seconds * RATE)
        at = self.seconds((0.3, 1.2))
        side, turn, closings = SIDES[int(self.rng.integers(2))], 0, 0
        while closings < 2:
            if turn < 2:
                phase = "opening"
            elif closings or at >= target:
                phase, closings = "closing", closings + 1
            else:
                phase = "middle"
            at = self._turn(side, at, phase)
            side, turn = SIDES[1 - SIDES.index(side)], turn + 1
        return max(track.free_at for track in self.tracks.values()) + self.seconds((0.5, 1.5))

    def segments(self, side: str, num_samples: int) -> list[Segment]:
        """The side's utterances as segments, each widened by a margin of the silence around it
        (at most half the gap to a neighbour, so segments stay SEGMENT_APART apart)."""
        # A stream of its own: the margins do not change what is said or how it sounds.
        rng = np.random.default_rng([self.spec.seed, 1 + SIDES.index(side)])
        placed = self.tracks[side].placed
        ends = [start + len(u.audio) for start, u in placed]
        middles = [(end + nxt) // 2 for end, (nxt, _) in zip(ends, placed[1:])]
        lowest = [0] + [m + SEGMENT_APART // 2 for m in middles]
        highest = [m - SEGMENT_APART // 2 for m in middles] + [num_samples]
        segments = []
        for (start, utterance), end, low, high in zip(placed, ends, lowest, highest):
            lead, tail = (int(rng.uniform(*SEGMENT_MARGIN_S) * RATE) for _ in range(2))
            segments.append(
                Segment(
                    max(start - lead, low),
                    min(end + tail, high),
                    tuple(t.shifted(start) for t in utterance.tokens),
                    tuple(p.shifted(start) for p in utterance.phones),
                )
            )
        return segments

    def channel(self, side: str, num_samples: int) -> np.ndarray:
        mix = np.zeros(num_samples, np.float32)
        for start, utterance in self.tracks[side].placed:
            mix[start : start + len(utterance.audio)] += utterance.audio
        noise_db = float(self.rng.uniform(*self.style.timing.noise_floor_db))
        return telephone_line(mix, self.rng, noise_db)


def render_conversation(spec: ConversationSpec, engine=None) -> tuple[Conversation, np.ndarray]:
    """The conversation's transcript segments and its (samples, 2) audio at RATE."""
    dialogue = _Dialogue(spec, engine)
    num_samples = dialogue.run()
    audio = np.stack([dialogue.channel(side, num_samples) for side in SIDES], axis=1)
    segments = {side: dialogue.segments(side, num_samples) for side in SIDES}
    return Conversation(spec=spec, num_samples=num_samples, segments=segments), audio
