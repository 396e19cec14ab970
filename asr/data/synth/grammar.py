"""A conversational grammar: what two strangers on a Switchboard call say to each other.

Sentences come from templates with `<slot>`s filled from a shared lexicon and a per-topic one
(family, weather, work, food, sports, travel, hobbies), as questions, answers, opinions,
stories, backchannels, greetings and goodbyes. Then disfluencies are added the way
spontaneous speech has them: fillers, repetitions, cut-off words, laughter, noises.

Held-out sentences: a fixed tenth of all sentences (by a hash of their words, the same for
every seed) may only appear in the evaluation sets, so the test text is new to the models
while its vocabulary and grammar are not. Very short sentences (backchannels) are shared.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np

from asr.data.synth import tokens as tk

# Contractions the templates use, with their expansions; the GLM is written from this table
# so that every contraction in the references has a scoring rule.
CONTRACTIONS: dict[str, tuple[str, ...]] = {
    "i'm": ("i am",),
    "i've": ("i have",),
    "i'll": ("i will",),
    "i'd": ("i would", "i had"),
    "you're": ("you are",),
    "you've": ("you have",),
    "you'd": ("you would", "you had"),
    "it's": ("it is", "it has"),
    "that's": ("that is", "that has"),
    "there's": ("there is", "there has"),
    "what's": ("what is", "what has"),
    "he's": ("he is", "he has"),
    "she's": ("she is", "she has"),
    "we're": ("we are",),
    "we've": ("we have",),
    "we'll": ("we will",),
    "we'd": ("we would", "we had"),
    "they're": ("they are",),
    "they've": ("they have",),
    "let's": ("let us",),
    "don't": ("do not",),
    "doesn't": ("does not",),
    "didn't": ("did not",),
    "can't": ("cannot", "can not"),
    "won't": ("will not",),
    "isn't": ("is not",),
    "wasn't": ("was not",),
    "haven't": ("have not",),
    "wouldn't": ("would not",),
    "couldn't": ("could not",),
    "name's": ("name is",),
    "how's": ("how is", "how has"),
}
FILLERS = ("uh", "um")
BACKCHANNELS = (
    "uh-huh",
    "yeah",
    "right",
    "um-hum",
    "oh really",
    "sure",
    "i see",
    "oh okay",
    "yeah yeah",
    "that's true",
    "oh wow",
    "exactly",
    "huh",
    "oh that's nice",
    "okay",
)
# Words MS98 would write in braces (coinages, non-standard words).
BRACED_WORDS = ("workaholic", "yuppies", "veggies", "couch-potato")

SHARED: dict[str, tuple[str, ...]] = {
    "like": ("like", "love", "enjoy", "really like", "kind of like"),
    "dislike": ("don't really like", "can't stand", "don't care for", "never liked"),
    "freq": (
        "every day",
        "every week",
        "once a week",
        "all the time",
        "a lot",
        "sometimes",
        "every now and then",
        "on the weekends",
        "twice a month",
        "every summer",
        "whenever i can",
    ),
    "past_time": (
        "last week",
        "last year",
        "a couple of years ago",
        "last summer",
        "yesterday",
        "back in college",
        "when i was a kid",
        "a few months ago",
        "the other day",
    ),
    "future_time": ("next year", "this summer", "next month", "one of these days", "pretty soon"),
    "relative": (
        "wife",
        "husband",
        "son",
        "daughter",
        "brother",
        "sister",
        "mother",
        "father",
        "kids",
        "parents",
        "grandmother",
        "cousin",
        "neighbor",
        "best friend",
        "roommate",
    ),
    "adj": (
        "nice",
        "great",
        "pretty good",
        "terrible",
        "expensive",
        "cheap",
        "interesting",
        "hard",
        "easy",
        "fun",
        "boring",
        "important",
        "different",
        "crazy",
        "wonderful",
        "a lot of work",
        "really relaxing",
        "kind of scary",
        "too much trouble",
    ),
    "hedge": (
        "i think",
        "i guess",
        "i mean",
        "i suppose",
        "you know",
        "probably",
        "i don't know",
        "it seems like",
        "well",
        "actually",
        "to be honest",
    ),
    "agree": (
        "yeah",
        "oh yeah",
        "right",
        "that's right",
        "exactly",
        "sure",
        "i know",
        "that's true",
        "oh i agree",
        "yeah that's what i think too",
    ),
    "name": (
        "john",
        "mary",
        "bob",
        "linda",
        "mike",
        "susan",
        "dave",
        "karen",
        "jim",
        "nancy",
        "tom",
        "lisa",
        "bill",
        "carol",
        "steve",
        "debbie",
        "paul",
        "janet",
    ),
    "place": (
        "dallas",
        "texas",
        "california",
        "new york",
        "boston",
        "chicago",
        "florida",
        "denver",
        "atlanta",
        "seattle",
        "colorado",
        "houston",
        "north carolina",
        "the mountains",
        "the coast",
    ),
    "people": ("people", "most people", "a lot of folks", "my friends", "young people"),
}

TOPICS: dict[str, dict[str, tuple[str, ...]]] = {
    "family": {
        "thing": (
            "family",
            "kids",
            "the holidays",
            "family reunions",
            "day care",
            "raising children",
            "big families",
            "family dinners",
            "teenagers",
            "grandparents",
        ),
        "activity": (
            "spend time with family",
            "visit my parents",
            "take the kids to the park",
            "have dinner together",
            "call home",
            "help with homework",
            "go to church",
        ),
        "kind": ("family activities", "games", "holiday traditions"),
    },
    "weather": {
        "thing": (
            "the weather",
            "the rain",
            "the snow",
            "the summer",
            "the winter",
            "storms",
            "the heat",
            "the humidity",
            "the spring",
            "tornadoes",
        ),
        "activity": (
            "go outside",
            "shovel snow",
            "stay inside",
            "watch the forecast",
            "work in the yard",
            "go for a walk",
            "sit on the porch",
        ),
        "kind": ("weather", "seasons", "climate"),
    },
    "work": {
        "thing": (
            "my job",
            "the company",
            "my boss",
            "the office",
            "computers",
            "overtime",
            "benefits",
            "retirement",
            "the commute",
            "{workaholic} people",
            "{yuppies}",
        ),
        "activity": (
            "work from home",
            "drive to work",
            "work long hours",
            "take a vacation",
            "wear a suit",
            "work on weekends",
            "eat lunch at the desk",
        ),
        "kind": ("work", "jobs", "companies"),
    },
    "food": {
        "thing": (
            "pizza",
            "mexican food",
            "chinese food",
            "restaurants",
            "barbecue",
            "{veggies}",
            "seafood",
            "fast food",
            "dessert",
            "chicken",
            "pasta",
            "home cooking",
        ),
        "activity": (
            "cook dinner",
            "eat out",
            "go to restaurants",
            "grill steaks",
            "bake bread",
            "try new recipes",
            "eat healthy",
        ),
        "kind": ("food", "restaurants", "cooking"),
    },
    "sports": {
        "thing": (
            "football",
            "baseball",
            "basketball",
            "the cowboys",
            "the rangers",
            "golf",
            "tennis",
            "soccer",
            "hockey",
            "the playoffs",
            "the super bowl",
            "college games",
        ),
        "activity": (
            "play golf",
            "watch football",
            "go to the games",
            "play tennis",
            "jog",
            "go fishing",
            "ride a bike",
            "play softball",
            "work out",
        ),
        "kind": ("sports", "teams", "exercise"),
    },
    "travel": {
        "thing": (
            "vacations",
            "flying",
            "the beach",
            "hotels",
            "camping trips",
            "europe",
            "mexico",
            "road trips",
            "national parks",
            "cruises",
        ),
        "activity": (
            "travel",
            "go camping",
            "fly",
            "drive across the country",
            "visit new places",
            "stay in hotels",
            "take pictures",
            "rent a car",
        ),
        "kind": ("trips", "vacations", "places"),
    },
    "hobbies": {
        "thing": (
            "gardening",
            "reading",
            "books",
            "music",
            "movies",
            "painting",
            "woodworking",
            "sewing",
            "photography",
            "the piano",
            "the guitar",
            "crafts",
            "television",
            "{couch-potato} weekends",
        ),
        "activity": (
            "read",
            "garden",
            "play the guitar",
            "watch movies",
            "sew",
            "paint",
            "listen to music",
            "build furniture",
            "go to the library",
        ),
        "kind": ("hobbies", "music", "books"),
    },
}

QUESTIONS = (
    "do you <activity>",
    "do you <activity> <freq>",
    "what do you think about <thing>",
    "how do you feel about <thing>",
    "do you like <thing>",
    "what kind of <kind> do you like",
    "so how about you",
    "did you ever <activity> when you were younger",
    "how often do you <activity>",
    "where do you live",
    "is that right",
    "have you been to <place>",
    "what's it like there",
    "are you into <thing>",
    "does your family <activity>",
    "what about <thing>",
    "you don't <activity> do you",
    "have you always lived in <place>",
)
STATEMENTS = (
    "<hedge> <thing> can be <adj>",
    "i <like> <thing>",
    "i <dislike> <thing>",
    "we <activity> <freq>",
    "my <relative> always wanted to <activity>",
    "i used to <activity> <freq> but i don't anymore",
    "i'd like to <activity> more often",
    "i don't get to <activity> very often",
    "<past_time> we went to <place>",
    "i'm not really into <thing>",
    "that's what i like about <thing>",
    "i've never really thought about <thing>",
    "we're thinking about going to <place> <future_time>",
    "my <relative> and i <activity> <freq>",
    "i don't think <thing> will ever change",
    "i'm from <place> originally",
    "<people> seem to <like> <thing>",
    "it's <adj> to <activity>",
    "<hedge> it's <adj>",
    "i'm gonna <activity> <future_time>",
    "there's a lot of <thing> around here",
    "my <relative> can't <activity>",
    "<past_time> my <relative> started to <activity>",
    "i've been trying to <activity> <freq>",
    "<thing> used to be <adj>",
    "i guess that's <adj>",
    "we didn't <activity> <past_time>",
    "<hedge> <people> don't <activity> anymore",
    "i don't blame them",
    "i see them <freq>",
    "we let them <activity> <freq>",
    "it wasn't <adj> at all",
    "you'd be surprised how much fun it is",
    "they're <adj>",
    "she's always wanted to <activity>",
    "he's been talking about <thing>",
    "let's see",
    "what's funny is that i <like> <thing>",
    "you're right about that",
    "you've got a point there",
    "they've got <thing> down in <place>",
    "we'll probably <activity> <future_time>",
    "we've been to <place> <past_time>",
    "i'll <activity> <future_time> i guess",
    "it doesn't really matter to me",
    "i couldn't <activity> <past_time>",
    "i wouldn't want to <activity> <freq>",
    "isn't that something",
    "<thing> never seemed <adj> to me",
    "i haven't been to <place> in years",
    "i'd rather <activity> than watch television",
    "my <relative> used to <activity> with them",
    "i don't know much about <kind>",
)
GREETINGS = (
    "hi",
    "hello",
    "hi this is <name>",
    "hi my name's <name>",
    "hello how are you",
    "hi i'm <name>",
    "hey how's it going",
)
CLOSINGS = (
    "well it was nice talking to you",
    "okay i guess that's about it",
    "nice talking with you bye bye",
    "you too bye",
    "okay take care",
    "all right bye now",
)
ASIDES = ("hold on a second", "just a minute honey", "be quiet please", "i'm on the phone")

HELD_OUT_FRACTION = 10  # one sentence in ten is reserved for the evaluation sets
SHORT_SENTENCE_WORDS = 3  # sentences this short are never held out
SLOT = re.compile(r"<([a-z_]+)>")
SLOT_NAMES = set(SHARED) | {"thing", "activity", "kind"}


@dataclass(frozen=True)
class Sentence:
    words: tuple[str, ...]
    question: bool = False

    @property
    def text(self) -> str:
        return " ".join(self.words)


@dataclass(frozen=True)
class Style:
    """How disfluent the speakers are (per utterance probabilities)."""

    filler: float = 0.25
    repetition: float = 0.06
    partial: float = 0.06
    laughter_word: float = 0.03
    laughter: float = 0.03
    noise: float = 0.03
    vocalized_noise: float = 0.03
    them_variant: float = 0.5
    aside: float = 0.01  # talking to someone in the room (marked only in the Hub5 stm)


SWITCHBOARD_STYLE = Style()
CALLHOME_STYLE = Style(filler=0.3, repetition=0.08, partial=0.08, laughter=0.05, noise=0.05, aside=0.06)


def is_held_out(sentence: Sentence) -> bool:
    """A seed-independent tenth of the sentences, by a stable hash of their words. (Grammar
    applies this to sentences from templates with slots; fixed sentences are shared.)"""
    if len(sentence.words) <= SHORT_SENTENCE_WORDS:
        return False
    digest = hashlib.blake2b(sentence.text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % HELD_OUT_FRACTION == 0


class Grammar:
    """Draws sentences for one conversation about one topic."""

    def __init__(self, rng: np.random.Generator, topic: str, held_out: bool):
        if topic not in TOPICS:
            raise ValueError(f"unknown topic {topic!r}")
        self.rng = rng
        self.topic = topic
        self.held_out = held_out
        self.slots = {**SHARED, **TOPICS[topic]}

    def _choice(self, options: tuple[str, ...]) -> str:
        return options[int(self.rng.integers(len(options)))]

    def _expand(self, template: str) -> str:
        return SLOT.sub(lambda m: self._expand(self._choice(self.slots[m.group(1)])), template)

    def _sentence(self, templates: tuple[str, ...], question: bool) -> Sentence:
        """A sentence from the right side of the held-out split (train vs. eval)."""
        for _ in range(100):
            template = self._choice(templates)
            if not SLOT.search(template):  # a fixed sentence is shared: its words stay in training
                return Sentence(tuple(template.split()), question)
            for _ in range(100):  # the template first, so templates stay equally likely
                sentence = Sentence(tuple(self._expand(template).split()), question)
                if is_held_out(sentence) == self.held_out:
                    return sentence
        raise RuntimeError("the grammar has too few sentences on one side of the held-out split")

    def question(self) -> Sentence:
        return self._sentence(QUESTIONS, question=True)

    def statement(self) -> Sentence:
        return self._sentence(STATEMENTS, question=False)

    def greeting(self) -> Sentence:
        return self._sentence(GREETINGS, question=False)

    def closing(self) -> Sentence:
        return self._sentence(CLOSINGS, question=False)

    def agreement(self) -> Sentence:
        return Sentence(tuple(self._expand("<agree>").split()))

    def backchannel(self) -> Sentence:
        return Sentence(tuple(self._choice(BACKCHANNELS).split()))

    def aside(self) -> Sentence:
        return Sentence(tuple(self._choice(ASIDES).split()))

    def turn(self, phase: str) -> list[Sentence]:
        """The sentences of one speaker turn; phase is 'opening', 'middle' or 'closing'."""
        if phase == "opening":
            return [self.greeting()]
        if phase == "closing":
            return [self.closing()]
        sentences = []
        if self.rng.random() < 0.35:
            sentences.append(self.agreement())
        for _ in range(1 + int(self.rng.integers(2))):
            sentences.append(self.statement())
        if self.rng.random() < 0.4:
            sentences.append(self.question())
        return sentences


def plain_tokens(sentence: Sentence) -> list[tk.Token]:
    """Tokens of a sentence before disfluencies: `{x}` in the lexicon marks a braced word."""
    out = []
    for text in sentence.words:
        if text.startswith("{") and text.endswith("}"):
            out.append(tk.braced(text[1:-1]))
        else:
            out.append(tk.word(text))
    return out


class Disfluencies:
    """Turns a clean sentence into what a speaker actually says (and transcribers write)."""

    def __init__(self, rng: np.random.Generator, style: Style):
        self.rng = rng
        self.style = style

    def _happens(self, probability: float) -> bool:
        return bool(self.rng.random() < probability)

    def apply(self, sentence: Sentence) -> list[tk.Token]:
        tokens = plain_tokens(sentence)
        tokens = [self._maybe_variant(t) for t in tokens]
        if len(tokens) > 2 and self._happens(self.style.partial):
            tokens = self._insert_partial(tokens)
        if len(tokens) > 1 and self._happens(self.style.repetition):
            tokens = [tokens[0]] + tokens
        if self._happens(self.style.filler):
            position = int(self.rng.integers(len(tokens))) if self._happens(0.5) else 0
            tokens.insert(position, tk.filler(FILLERS[int(self.rng.integers(len(FILLERS)))]))
        if self._happens(self.style.laughter_word):
            i = int(self.rng.integers(len(tokens)))
            if tokens[i].kind == tk.WORD:
                tokens[i] = tk.laughter_word(tokens[i].word)
        if self._happens(self.style.vocalized_noise):
            tokens.insert(0, tk.vocalized_noise())
        if self._happens(self.style.noise):
            tokens.insert(0 if self._happens(0.5) else len(tokens), tk.noise())
        if self._happens(self.style.laughter):
            tokens.append(tk.laughter())
        return tokens

    def _maybe_variant(self, token: tk.Token) -> tk.Token:
        if token.kind == tk.WORD and token.word == "them" and self._happens(self.style.them_variant):
            return tk.variant("them")
        return token

    def _insert_partial(self, tokens: list[tk.Token]) -> list[tk.Token]:
        """A false start: the first letters of a coming word, cut off, then the word itself."""
        candidates = [i for i, t in enumerate(tokens) if t.kind == tk.WORD and len(t.word) >= 5 and t.word.isalpha()]
        if not candidates:
            return tokens
        i = candidates[int(self.rng.integers(len(candidates)))]
        prefix_len = 2 + int(self.rng.integers(2))
        return tokens[:i] + [tk.partial(tokens[i].word, prefix_len)] + tokens[i:]

    def with_aside(self, tokens: list[tk.Token], aside: Sentence) -> list[tk.Token]:
        """CallHome speakers talk to someone in the room: <B_ASIDE> ... <E_ASIDE> in the stm."""
        return [tk.mark("<B_ASIDE>")] + plain_tokens(aside) + [tk.mark("<E_ASIDE>")] + tokens


def vocabulary() -> set[str]:
    """Every word the grammar can produce (for reports and tests)."""
    words: set[str] = set()
    texts = [t for table in (SHARED, *TOPICS.values()) for options in table.values() for t in options]
    texts += list(QUESTIONS + STATEMENTS + GREETINGS + CLOSINGS + ASIDES + BACKCHANNELS + FILLERS)
    for text in texts:
        for w in SLOT.sub(" ", text).split():
            words.add(w.strip("{}"))
    return words
