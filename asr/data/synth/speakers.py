"""Synthetic speakers: an eSpeak NG English accent, a voice variant, a speaking rate and a pitch.

Training speakers form a pool that conversations draw their two sides from (as real
Switchboard callers took part in several calls). Evaluation speakers are never in training:
each is an (accent, variant) pairing that no training speaker has, built only from accents
and variants that training does cover, with rate and pitch inside the training ranges.
The Switchboard-like test half uses eSpeak's standard variants at ordinary rates; the
CallHome-like half uses the named variants and the fast end of the rate range, which makes
it the harder subset, as CallHome is in Hub5-2000.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

import numpy as np

ACCENTS = ("en-us", "en", "en-gb-scotland", "en-029", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-us-nyc")
STANDARD_VARIANTS = {
    **{f"m{i}": "M" for i in range(1, 9)},
    **{f"f{i}": "F" for i in range(1, 6)},
}
NAMED_VARIANTS = {
    "adam": "M",
    "benjamin": "M",
    "david": "M",
    "edward": "M",
    "iven": "M",
    "john": "M",
    "michel": "M",
    "norbert": "M",
    "paul": "M",
    "quincy": "M",
    "rob": "M",
    "robert": "M",
    "travis": "M",
    "victor": "M",
    "max": "M",
    "ed": "M",
    "anika": "F",
    "Annie": "F",
    "aunty": "F",
    "belinda": "F",
    "linda": "F",
    "steph": "F",
    "shelby": "F",
}
VARIANT_GENDER = {**STANDARD_VARIANTS, **NAMED_VARIANTS}

RATE_RANGE = (135, 200)  # words per minute; eSpeak's default is 175
PITCH_RANGE = (25, 75)  # eSpeak 0-100 (base pitch relative to the variant's own)
INTONATION_RANGE = (25, 85)  # eSpeak's pitch range: flat (0) to lively (100)
GAIN_DB_RANGE = (-4.0, 4.0)  # level of the caller on the line
CALLHOME_RATE_FRACTION = 0.7  # CallHome-like speakers use the top 30% of the rate range


@dataclass(frozen=True)
class Speaker:
    id: str
    accent: str
    variant: str
    gender: str  # M or F, for the stm's <O,sw,M,sw-M> tags
    rate: int
    pitch: int
    intonation: int
    gain_db: float

    @property
    def voice(self) -> str:
        """The name eSpeak's espeak_SetVoiceByName() understands."""
        return f"{self.accent}+{self.variant}"

    @property
    def combination(self) -> tuple[str, str]:
        return (self.accent, self.variant)

    def as_row(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SpeakerSets:
    train: list[Speaker]
    eval_swb: list[Speaker]
    eval_callhome: list[Speaker]


def _draw(
    rng: np.random.Generator,
    speaker_id: str,
    accent: str,
    variant: str,
    rate_range: tuple[float, float] = RATE_RANGE,
    pitch_range: tuple[int, int] = PITCH_RANGE,
) -> Speaker:
    return Speaker(
        id=speaker_id,
        accent=accent,
        variant=variant,
        gender=VARIANT_GENDER[variant],
        rate=int(rng.integers(round(rate_range[0]), round(rate_range[1]) + 1)),
        pitch=int(rng.integers(pitch_range[0], pitch_range[1] + 1)),
        intonation=int(rng.integers(INTONATION_RANGE[0], INTONATION_RANGE[1] + 1)),
        gain_db=round(float(rng.uniform(*GAIN_DB_RANGE)), 2),
    )


def _training_combinations(rng: np.random.Generator, count: int) -> list[tuple[str, str]]:
    """`count` (accent, variant) pairs covering every accent and variant once before repeating."""
    variants = list(VARIANT_GENDER)
    rng.shuffle(variants)
    accents = list(ACCENTS)
    rng.shuffle(accents)
    # Walk a Latin-square diagonal so that the first len(variants) speakers cover all
    # variants and all accents; later laps shift the accent so pairs differ.
    pairs = []
    for lap in itertools.count():
        for i, variant in enumerate(variants):
            pairs.append((accents[(i + lap * 3) % len(accents)], variant))
            if len(pairs) == count:
                return pairs
    raise AssertionError("unreachable")


def _held_out_combinations(
    used: set[tuple[str, str]], variants: dict[str, str], rng: np.random.Generator
) -> list[tuple[str, str]]:
    """Pairs of a trained accent and a trained variant that no training speaker has."""
    accents = sorted({a for a, _ in used})
    trained_variants = sorted({v for _, v in used} & set(variants))
    pairs = [(a, v) for a in accents for v in trained_variants if (a, v) not in used]
    order = rng.permutation(len(pairs))
    return [pairs[i] for i in order]


def make_speakers(rng: np.random.Generator, train_count: int, swb_count: int, callhome_count: int) -> SpeakerSets:
    train_pairs = _training_combinations(rng, train_count)
    train = [_draw(rng, f"train{i + 1:03d}", a, v) for i, (a, v) in enumerate(train_pairs)]
    used = set(train_pairs)
    swb_pairs = _held_out_combinations(used, STANDARD_VARIANTS, rng)[:swb_count]
    callhome_pool = _held_out_combinations(used, NAMED_VARIANTS, rng) or _held_out_combinations(
        used, VARIANT_GENDER, rng
    )
    callhome_pairs = [p for p in callhome_pool if p not in swb_pairs][:callhome_count]
    if len(swb_pairs) < swb_count or len(callhome_pairs) < callhome_count:
        raise ValueError(
            f"{train_count} training speakers leave too few unseen accent/variant pairs for "
            f"{swb_count}+{callhome_count} evaluation speakers; raise synth.train_speakers"
        )
    # Evaluation rates and pitches stay inside what the training speakers actually cover.
    rates = (min(s.rate for s in train), max(s.rate for s in train))
    pitches = (min(s.pitch for s in train), max(s.pitch for s in train))
    fast = (rates[0] + CALLHOME_RATE_FRACTION * (rates[1] - rates[0]), rates[1])
    return SpeakerSets(
        train=train,
        eval_swb=[_draw(rng, f"swbeval{i + 1:02d}", a, v, rates, pitches) for i, (a, v) in enumerate(swb_pairs)],
        eval_callhome=[
            _draw(rng, f"cheval{i + 1:02d}", a, v, fast, pitches) for i, (a, v) in enumerate(callhome_pairs)
        ],
    )
