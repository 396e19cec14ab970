"""A small ctypes binding to libespeak-ng, as shipped by the `espeakng_loader` wheel.

Only what the corpus generator needs: synthesise one utterance with a given voice, rate and
pitch, and return its 16-bit samples together with the sample offset where each word starts
(eSpeak's word events) and where each phoneme starts (its phoneme events, enabled by
espeakINITIALIZE_PHONEME_EVENTS), so transcripts and phones can be time-aligned to the audio
exactly; and the phonemes of a text without audio (espeak_TextToPhonemes), for the corpus'
pronunciation dictionary.

The library keeps global state, so there is one engine per process (`Espeak.instance()`);
the generator's worker processes each initialise their own. That state also carries from one
utterance to the next (the same text can come out a few samples longer or shorter the second
time, even after espeak_Terminate/espeak_Initialize), so output is reproducible only for the
same sequence of calls in a fresh process; the corpus generator relies on exactly that.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from asr.utils.errors import InputError

# speak_lib.h
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_EVENT_LIST_TERMINATED = 0
_EVENT_WORD = 1
_EVENT_PHONEME = 7
_INITIALIZE_PHONEME_EVENTS = 0x0001
_PARAM_RATE = 1
_PARAM_VOLUME = 2
_PARAM_PITCH = 3
_PARAM_RANGE = 4
_PARAM_WORDGAP = 7
_PHONEMES_SEPARATOR_SHIFT = 8  # espeak_TextToPhonemes: bits 8-23 of phonememode hold the separator
_WORD_INNER_SEPARATOR = "|"  # between a word's phonemes; words are separated by spaces


class _EventId(ctypes.Union):
    _fields_ = [("number", ctypes.c_int), ("name", ctypes.c_char_p), ("string", ctypes.c_char * 8)]


class _Event(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),  # 1-based character offset of the word
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),  # milliseconds from the start of the text
        ("sample", ctypes.c_int),  # samples from the start of the text (exact; audio_position is rounded)
        ("user_data", ctypes.c_void_p),
        ("id", _EventId),
    ]


_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event))


@dataclass(frozen=True)
class WordEvent:
    char_offset: int  # 0-based offset of the word in the synthesised text
    sample: int  # where the word starts in the returned samples


@dataclass(frozen=True)
class PhonemeEvent:
    name: str  # eSpeak's mnemonic, stress marks included ("'aU"); pauses start with "_"
    sample: int  # where the phoneme starts in the returned samples; it lasts until the next event


@dataclass(frozen=True)
class Synthesis:
    samples: np.ndarray  # int16, mono, at `rate`
    rate: int
    words: list[WordEvent]
    phonemes: list[PhonemeEvent]


def _load_library() -> tuple[ctypes.CDLL, str]:
    try:
        import espeakng_loader
    except ImportError:
        raise InputError("the espeakng-loader package is not installed; pip install espeakng-loader") from None
    library = ctypes.CDLL(espeakng_loader.get_library_path())
    data_dir = espeakng_loader.get_data_path()
    library.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    library.espeak_SetSynthCallback.argtypes = [_CALLBACK]
    library.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    library.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    library.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_int]
    library.espeak_TextToPhonemes.restype = ctypes.c_char_p
    library.espeak_Synth.argtypes = [
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_uint,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.c_uint,
        ctypes.POINTER(ctypes.c_uint),
        ctypes.c_void_p,
    ]
    # espeak_Initialize wants the directory that *contains* espeak-ng-data.
    return library, str(Path(data_dir).parent)


class Espeak:
    """The process's eSpeak NG engine in synchronous (retrieval) mode."""

    _instance: "Espeak | None" = None

    def __init__(self) -> None:
        self._lib, data_parent = _load_library()
        self.rate = self._lib.espeak_Initialize(
            _AUDIO_OUTPUT_SYNCHRONOUS, 0, data_parent.encode(), _INITIALIZE_PHONEME_EVENTS
        )
        if self.rate <= 0:
            raise InputError(f"libespeak-ng failed to initialise with data under {data_parent}")
        self._chunks: list[np.ndarray] = []
        self._events: list[WordEvent] = []
        self._phonemes: list[PhonemeEvent] = []
        self._callback = _CALLBACK(self._collect)  # kept alive: the library holds the pointer
        self._lib.espeak_SetSynthCallback(self._callback)
        # Voices' noise sources draw from libc rand() and from eSpeak NG's own generator, which
        # left to itself differs from one process to the next: both are reseeded per utterance
        # from the caller's generator, so the audio never depends on anything outside the
        # conversation.
        self._libc = ctypes.CDLL(None)
        self._lib.espeak_ng_SetRandSeed.argtypes = [ctypes.c_long]

    @classmethod
    def instance(cls) -> "Espeak":
        if cls._instance is None:
            cls._instance = Espeak()
        return cls._instance

    def _collect(self, wav, count, events) -> int:
        if count > 0:
            self._chunks.append(np.ctypeslib.as_array(wav, shape=(count,)).copy())
        i = 0
        while events[i].type != _EVENT_LIST_TERMINATED:
            event = events[i]
            if event.type == _EVENT_WORD:
                sample = event.audio_position * self.rate // 1000
                self._events.append(WordEvent(char_offset=event.text_position - 1, sample=sample))
            elif event.type == _EVENT_PHONEME:
                # id.string: up to 8 bytes, NUL-terminated only when shorter
                name = bytes(event.id.string).split(b"\0", 1)[0].decode("utf-8")
                self._phonemes.append(PhonemeEvent(name=name, sample=event.sample))
            i += 1
        return 0

    def synthesize(self, text: str, voice: str, rate: int, pitch: int, pitch_range: int, seed: int = 0) -> Synthesis:
        """Speak `text` (plain ASCII words) with `voice` such as 'en-us+m3'.

        rate is in words per minute (80-450); pitch and pitch_range are eSpeak's 0-100.
        """
        if self._lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise InputError(f"eSpeak NG has no voice {voice!r}; check the synth speaker configuration")
        for parameter, value in (
            (_PARAM_RATE, rate),
            (_PARAM_PITCH, pitch),
            (_PARAM_RANGE, pitch_range),
            (_PARAM_VOLUME, 100),
            (_PARAM_WORDGAP, 0),
        ):
            self._lib.espeak_SetParameter(parameter, int(value), 0)
        self._libc.srand(ctypes.c_uint(seed & 0xFFFFFFFF))
        self._lib.espeak_ng_SetRandSeed(seed & 0xFFFFFFFF)
        self._chunks, self._events, self._phonemes = [], [], []
        data = text.encode("utf-8") + b"\0"
        status = self._lib.espeak_Synth(data, len(data), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None)
        if status != 0:
            raise RuntimeError(f"espeak_Synth failed with status {status} for {text!r}")
        samples = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.int16)
        return Synthesis(
            samples=samples.astype(np.int16, copy=False),
            rate=self.rate,
            words=list(self._events),
            phonemes=list(self._phonemes),
        )

    def phonemes_by_word(self, text: str, voice: str) -> list[list[str]]:
        """The mnemonics of `text` word by word, as eSpeak says the words together (function
        words unstressed, sounds changed at word boundaries)."""
        return [
            word.split(_WORD_INNER_SEPARATOR) for word in self._text_to_phonemes(text, voice, _WORD_INNER_SEPARATOR)
        ]

    def phonemes(self, text: str, voice: str) -> list[str]:
        """eSpeak's phoneme mnemonics for `text` as `voice` speaks it (stress marks and pauses
        included, as in the phoneme events), without synthesising audio.

        espeak_TextToPhonemes translates one clause per call and advances the text pointer;
        the mnemonics are those the phoneme events carry (the same phoneme table).
        """
        return [name for word in self._text_to_phonemes(text, voice, " ") for name in word.split()]

    def _text_to_phonemes(self, text: str, voice: str, separator: str) -> list[str]:
        """Words of mnemonics, `separator` between a word's mnemonics, clause by clause."""
        if self._lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise InputError(f"eSpeak NG has no voice {voice!r}; check the synth speaker configuration")
        remaining = ctypes.c_char_p(text.encode("utf-8"))
        pointer = ctypes.pointer(remaining)
        mode = ord(separator) << _PHONEMES_SEPARATOR_SHIFT  # ASCII mnemonics
        words: list[str] = []
        while pointer.contents.value:
            clause = self._lib.espeak_TextToPhonemes(pointer, _CHARS_UTF8, mode)
            words += (clause or b"").decode("utf-8").split(" ")
        return [word for word in words if word]
