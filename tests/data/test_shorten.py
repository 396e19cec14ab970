"""Shorten-compressed SPHERE: detected from the header, decoded by FFmpeg exactly, read through
wav.scp like any file, and refused with a conversion hint when FFmpeg cannot decode it."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from asr.data.audio import read_recording, read_segment, recording_duration
from asr.data.shorten import FN_VERBATIM, BitReader, read_stream_header
from asr.data.sphere import read_sphere_header
from asr.data.synth.shorten import encode_shorten, sphere_header, write_shorten_sphere
from asr.data.validate import validate_data_dir
from asr.utils.errors import InputError

RATE = 8000


def pcm(frames: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(frames)[:, None]
    x = 8000 * np.sin(t * np.array([0.013, 0.041])) + rng.normal(0, 300, (frames, 2))
    x[100:140, 0] = 32767  # the extremes survive too
    x[200:240, 1] = -32768
    return np.clip(x, -32768, 32767).astype(np.int16)


@pytest.fixture
def shortened(tmp_path):
    samples = pcm(RATE * 3 + 77)  # not a whole number of 256-sample blocks: the last is shorter
    path = tmp_path / "sw_4390.sph"
    write_shorten_sphere(path, samples, RATE)
    return path, samples


def test_header_says_shorten_and_real_length(shortened):
    path, samples = shortened
    header = read_sphere_header(path)
    assert header.shorten and header.compressed
    assert header.sample_coding == "pcm,embedded-shorten-v2.00"
    assert header.sample_count == len(samples) and header.channel_count == 2
    assert path.stat().st_size < 1024 + samples.nbytes  # it is compressed
    assert recording_duration(str(path)) == pytest.approx(len(samples) / RATE)


def test_ffmpeg_decodes_our_stream_exactly(shortened):
    path, samples = shortened
    for channel in (1, 2):
        audio, rate = read_recording(f"sph2pipe -f wav -p -c {channel} {path} |")
        assert rate == RATE
        np.testing.assert_array_equal(np.round(audio * 32768).astype(np.int16), samples[:, channel - 1])


def test_segment_of_a_shorten_file_and_of_a_plain_file(shortened, tmp_path):
    path, samples = shortened
    audio, _ = read_segment(f"sph2pipe -f wav -p -c 2 {path} |", 1.0, 2.5, "utt")
    np.testing.assert_array_equal(np.round(audio * 32768).astype(np.int16), samples[8000:20000, 1])
    plain = tmp_path / "plain.sph"
    sf.write(plain, samples, RATE, format="NIST", subtype="PCM_16")
    audio, _ = read_segment(f"sph2pipe -f wav -p -c 1 {plain} |", 0.5, 1.0, "utt")
    np.testing.assert_array_equal(np.round(audio * 32768).astype(np.int16), samples[4000:8000, 0])
    with pytest.raises(InputError, match="segment utt: ends at 9.00s but the recording lasts 3.01s"):
        read_segment(f"sph2pipe -f wav -p -c 1 {plain} |", 8.0, 9.0, "utt")


def test_stream_header_fields(shortened):
    path, _ = shortened
    header = read_stream_header(path.read_bytes()[1024:], str(path))
    assert (header.version, header.file_type, header.channels, header.block_size) == (2, 3, 2, 256)
    # NIST's embedded streams have no verbatim block: the next command is an audio one
    assert BitReader(path.read_bytes()[1024:], header.end_bit).unsigned_rice(2) != FN_VERBATIM


def test_ulaw_shorten_is_refused_with_a_conversion_hint(tmp_path):
    # The type field after magic and version: type 3 (signed 16-bit) is coded as its width 2
    # (Rice k=2: "110") then 3 (k=2: "111"); u-law, type 7, is width 3 ("111") then "1111".
    bits = np.unpackbits(np.frombuffer(encode_shorten(pcm(1000)), np.uint8))
    assert "".join(map(str, bits[40:46])) == "110111"
    patched = np.concatenate([bits[:40], np.ones(7, np.uint8), bits[46:]])
    path = tmp_path / "ulaw.sph"
    path.write_bytes(
        sphere_header(1000, 2, RATE, "ulaw,embedded-shorten-v2.00", 1, "1") + np.packbits(patched).tobytes()
    )
    with pytest.raises(InputError, match="u-law or other.*sph2pipe -f wav"):
        read_recording(str(path))


def test_other_compression_refused_and_truncated_stream_named(tmp_path, shortened):
    wavpack = tmp_path / "w.sph"
    wavpack.write_bytes(sphere_header(100, 1, RATE, "pcm,embedded-wavpack", 2, "01") + bytes(50))
    with pytest.raises(InputError, match="'pcm,embedded-wavpack' is not supported; convert it"):
        read_recording(str(wavpack))
    path, _ = shortened
    cut = tmp_path / "cut.sph"
    cut.write_bytes(path.read_bytes()[: 1024 + 5000])
    with pytest.raises(InputError, match="truncated"):
        read_recording(str(cut))


def test_validator_reads_shorten_files_in_a_data_dir(shortened, tmp_path):
    path, samples = shortened
    d = tmp_path / "eval"
    d.mkdir()
    (d / "wav.scp").write_text(f"sw_4390-A sph2pipe -f wav -p -c 1 {path} |\n")
    (d / "segments").write_text("sw_4390-A_000010-000200 sw_4390-A 0.10 2.00\n")
    (d / "text").write_text("sw_4390-A_000010-000200 hello\n")
    (d / "utt2spk").write_text("sw_4390-A_000010-000200 sw_4390-A\n")
    (d / "spk2utt").write_text("sw_4390-A sw_4390-A_000010-000200\n")
    assert validate_data_dir(d) == []
