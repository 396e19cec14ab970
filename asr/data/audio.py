"""Audio input: recordings named by wav.scp entries, and segments cut from them.

A wav.scp value is one of
  * a file path (NIST SPHERE, WAV, FLAC... anything libsndfile reads), first channel;
    shorten-compressed SPHERE (the header's `sample_coding` says so) is decoded through
    FFmpeg (asr.data.shorten);
  * Kaldi's Switchboard form `sph2pipe -f wav -p -c N /path/x.sph |`, read natively
    (channel N, 1-based) so sph2pipe need not be installed;
  * Kaldi's speed perturbation `<entry> | sox -t wav - -t wav - speed F |` (or
    `sox -t wav <file> -t wav - speed F |`), read natively with the speed change done in
    Python (asr.data.perturb), so sox need not be installed;
  * any other command ending in `|` whose standard output is a WAV file, run by /bin/sh as
    Kaldi runs it, when the command policy allows (asr.kaldi.commands: a data dir is trusted
    code; validate and fix do not run commands unless asked).
Samples are returned as float32 in [-1, 1) at the file's own rate.
"""

from __future__ import annotations

import io
import shlex
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from asr.data.perturb import change_speed, sox_speed_pipe
from asr.data.shorten import CONVERT_HINT, decode_shorten
from asr.data.sphere import SphereHeader, is_sphere, read_sphere_header
from asr.kaldi.commands import run_command
from asr.utils.errors import InputError

# How far a segment may end past the last sample: a frame of rounding, as Kaldi tolerates.
SEGMENT_END_TOLERANCE_S = 0.02


@dataclass(frozen=True)
class AudioSource:
    path: str | None  # a file to read directly, or None for a pipe
    channel: int = 0  # 0-based
    command: str | None = None  # shell command writing WAV to stdout


def parse_wav_scp_entry(value: str) -> AudioSource:
    value = value.strip()
    if not value.endswith("|"):
        return AudioSource(path=value)
    command = value[:-1].strip()
    if sox_speed_pipe(command) is not None:
        return AudioSource(path=None, command=command)  # read natively by _read_pipe
    native = _sph2pipe_source(command)
    return native if native is not None else AudioSource(path=None, command=command)


def _sph2pipe_source(command: str) -> AudioSource | None:
    """`sph2pipe [-f wav] [-p] [-c N] file`, read natively; None for anything else (another
    option, several files, shell syntax), which only the command itself can read."""
    try:  # unquoted ; & | < > ( ) become tokens of their own, so shell syntax is seen
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:  # unbalanced quotes: not ours to interpret
        return None
    if not words or Path(words[0]).name != "sph2pipe":
        return None
    channel, paths, i = 1, [], 1
    while i < len(words):
        word = words[i]
        if word in ("-f", "-c") and i + 1 < len(words):
            if word == "-c":
                if not words[i + 1].isdigit() or int(words[i + 1]) < 1:
                    return None
                channel = int(words[i + 1])
            elif words[i + 1] not in ("wav", "rif", "raw", "sph"):
                return None
            i += 2
        elif word == "-p":
            i += 1
        elif word.startswith("-") or (word and set(word) <= set(";&|<>()")):
            return None
        else:
            paths.append(word)
            i += 1
    return AudioSource(path=paths[0], channel=channel - 1) if len(paths) == 1 else None


def shell_command(value: str) -> str | None:
    """The command reading this wav.scp value runs through the shell; None when it is read
    natively (a file, sph2pipe, sox speed perturbation of such an entry)."""
    source = parse_wav_scp_entry(value)
    if source.command is None:
        return None
    perturbed = sox_speed_pipe(source.command)
    return shell_command(perturbed[0]) if perturbed is not None else source.command


def _check_exists(path: str) -> None:
    if not Path(path).is_file():
        raise InputError(f"{path}: audio file not found (named in wav.scp); check the corpus path")


def _read_compressed_sphere(path: str, header: SphereHeader) -> tuple[np.ndarray, int]:
    """All channels of a compressed SPHERE file, or an InputError saying how to convert it."""
    if not header.shorten:
        raise InputError(f"{path}: SPHERE sample_coding {header.sample_coding!r} is not supported; {CONVERT_HINT}")
    return decode_shorten(path, header.header_bytes, header.sample_rate, header.sample_count), header.sample_rate


def _read_file(path: str, channel: int, start: float = 0.0, end: float | None = None) -> tuple[np.ndarray, int]:
    """One channel of [start, end) seconds (the whole file by default); plain files are read from
    the requested frame on, so a segment costs only its own samples."""
    _check_exists(path)
    try:
        header = read_sphere_header(path) if is_sphere(path) else None
        if header is not None and header.compressed:
            samples, rate = _read_compressed_sphere(path, header)
            samples = samples[int(round(start * rate)) : None if end is None else int(round(end * rate))]
        else:
            rate = sf.info(path).samplerate
            first, last = int(round(start * rate)), None if end is None else int(round(end * rate))
            samples, rate = sf.read(path, start=first, stop=last, dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError) as err:
        raise InputError(
            f"{path}: cannot read audio ({err}); the file is damaged or in a format libsndfile does not know"
        ) from None
    if channel >= samples.shape[1]:
        raise InputError(f"{path}: channel {channel + 1} requested but the file has {samples.shape[1]}")
    return np.ascontiguousarray(samples[:, channel]), rate


def _read_pipe(command: str, channel: int) -> tuple[np.ndarray, int]:
    perturbed = sox_speed_pipe(command)
    if perturbed is not None:
        inner, factor = perturbed
        samples, rate = read_recording(inner)
        return change_speed(samples, factor), rate
    output = run_command(command, "wav.scp")
    try:
        samples, rate = sf.read(io.BytesIO(output), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError) as err:
        raise InputError(f"wav.scp command did not produce readable audio ({err}): {command}") from None
    return np.ascontiguousarray(samples[:, channel]), rate


def read_recording(wav_scp_value: str) -> tuple[np.ndarray, int]:
    """Read a whole recording (one channel) named by a wav.scp value."""
    source = parse_wav_scp_entry(wav_scp_value)
    if source.path is not None:
        return _read_file(source.path, source.channel)
    return _read_pipe(source.command or "", source.channel)


def recording_duration(wav_scp_value: str) -> float:
    """Duration in seconds, from the header when the entry is a file (cheap)."""
    source = parse_wav_scp_entry(wav_scp_value)
    if source.path is not None:
        _check_exists(source.path)
        if is_sphere(source.path):
            return read_sphere_header(source.path).duration  # libsndfile cannot open shorten ones
        try:
            info = sf.info(source.path)
        except (sf.LibsndfileError, RuntimeError) as err:
            raise InputError(f"{source.path}: cannot read audio header ({err})") from None
        return info.frames / info.samplerate
    samples, rate = _read_pipe(source.command or "", source.channel)
    return len(samples) / rate


def read_segment(wav_scp_value: str, start: float, end: float, name: str = "") -> tuple[np.ndarray, int]:
    """One segment of a recording without reading the rest of a plain file (nor writing a wav).

    Like Kaldi's extract-segments, a segment may end a little past the audio (tolerance below);
    further is an error naming the segment.
    """
    source = parse_wav_scp_entry(wav_scp_value)
    if source.path is None:
        samples, rate = _read_pipe(source.command or "", source.channel)
        return cut_segment(samples, rate, start, end, name), rate
    if start < 0 or end <= start:
        raise InputError(f"segment {name}: bad times {start:.2f}-{end:.2f}")
    duration = recording_duration(wav_scp_value)
    if end > duration + SEGMENT_END_TOLERANCE_S:
        raise InputError(
            f"segment {name}: ends at {end:.2f}s but the recording lasts {duration:.2f}s; "
            "fix or drop it (python -m asr.data.fix)"
        )
    return _read_file(source.path, source.channel, start, end)


def cut_segment(samples: np.ndarray, rate: int, start: float, end: float, name: str = "") -> np.ndarray:
    """Samples of [start, end) seconds; a segment past the end of the audio is an error."""
    first, last = int(round(start * rate)), int(round(end * rate))
    duration = len(samples) / rate
    if start < 0 or end <= start:
        raise InputError(f"segment {name}: bad times {start:.2f}-{end:.2f}")
    if last > len(samples) + int(SEGMENT_END_TOLERANCE_S * rate):
        raise InputError(
            f"segment {name}: ends at {end:.2f}s but the recording lasts {duration:.2f}s; "
            "fix or drop it (python -m asr.data.fix)"
        )
    return samples[first : min(last, len(samples))]


class RecordingCache:
    """Keeps the most recent recording in memory: segments of a data dir sorted by id come
    grouped by recording, so each recording is read once."""

    def __init__(self, wav_scp: dict[str, str]):
        self.wav_scp = wav_scp
        self._key: str | None = None
        self._audio: tuple[np.ndarray, int] | None = None

    def get(self, recording: str) -> tuple[np.ndarray, int]:
        if recording != self._key:
            if recording not in self.wav_scp:
                raise InputError(f"recording {recording!r} is not in wav.scp")
            self._audio = read_recording(self.wav_scp[recording])
            self._key = recording
        assert self._audio is not None
        return self._audio
