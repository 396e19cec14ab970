"""Speed perturbation: Kaldi's data-dir form, and its sox pipes read natively."""

import numpy as np
import pytest
import scipy.signal
import soundfile as sf

from asr.data.audio import parse_wav_scp_entry, read_recording
from asr.data.datadir import DataDir, read_data_dir, write_data_dir
from asr.data.perturb import change_speed, main, sox_speed_pipe
from asr.data.validate import validate_data_dir
from asr.kaldi.segments import Segment
from asr.kaldi.table import read_table

RATE = 8000


def tone(seconds: float, freq: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


@pytest.fixture
def data_dir(tmp_path):
    """One 2-channel SPHERE conversation (sph2pipe entries) and one plain WAV recording."""
    stereo = np.stack([tone(3.0, 500), tone(3.0, 1000)], axis=1)
    sf.write(tmp_path / "sw02001.sph", stereo, RATE, format="NIST", subtype="PCM_16")
    sf.write(tmp_path / "extra.wav", tone(2.0, 800), RATE)
    d = DataDir()
    for channel, side in enumerate("AB"):
        reco = f"sw02001-{side}"
        d.wav_scp[reco] = f"sph2pipe -f wav -p -c {channel + 1} {tmp_path / 'sw02001.sph'} |"
        d.reco2file_and_channel[reco] = ("sw02001", side)
        for start, end in [(0.10, 1.00), (1.50, 2.70)]:
            utt = f"{reco}_{round(start * 100):06d}-{round(end * 100):06d}"
            d.segments[utt] = Segment(reco, start, end)
            d.utt2spk[utt] = reco
            d.text[utt] = f"words of {utt}"
            d.utt2dur[utt] = end - start
    d.wav_scp["x-extra"] = str(tmp_path / "extra.wav")
    d.reco2file_and_channel["x-extra"] = ("extra", "A")
    d.segments["x-extra_000000-000150"] = Segment("x-extra", 0.0, 1.5)
    d.utt2spk["x-extra_000000-000150"] = "x-extra"
    d.text["x-extra_000000-000150"] = "more words"
    d.utt2dur["x-extra_000000-000150"] = 1.5
    return write_data_dir(d, tmp_path / "data" / "train")


def test_three_way_data_dirs_in_kaldis_form(data_dir, tmp_path):
    assert main([str(data_dir)]) == 0
    slow = read_data_dir(tmp_path / "data" / "train_sp0.9")
    assert sorted(slow.utt2spk) == sorted("sp0.9-" + u for u in read_data_dir(data_dir).utt2spk)
    utt = "sp0.9-sw02001-A_000150-000270"
    assert slow.utt2spk[utt] == "sp0.9-sw02001-A"
    assert slow.segments[utt] == Segment("sp0.9-sw02001-A", round(1.5 / 0.9, 2), round(2.7 / 0.9, 2))
    assert slow.utt2dur[utt] == pytest.approx(1.2 / 0.9, abs=1e-3)  # written with 3 decimals
    assert slow.text[utt] == "words of sw02001-A_000150-000270"
    assert slow.reco2file_and_channel["sp0.9-sw02001-A"] == ("sw02001", "A")
    sph = tmp_path / "sw02001.sph"
    assert slow.wav_scp["sp0.9-sw02001-B"] == f"sph2pipe -f wav -p -c 2 {sph} | sox -t wav - -t wav - speed 0.9 |"
    assert slow.wav_scp["sp0.9-x-extra"] == f"sox -t wav {tmp_path / 'extra.wav'} -t wav - speed 0.9 |"
    assert (
        read_table(tmp_path / "data" / "train_sp1.1" / "utt2uniq")["sp1.1-x-extra_000000-000150"]
        == "x-extra_000000-000150"
    )

    combined = read_data_dir(tmp_path / "data" / "train_sp")
    assert len(combined.utt2spk) == 3 * 5
    assert {u.split("-")[0] for u in combined.utt2spk if u.startswith("sp")} == {"sp0.9", "sp1.1"}
    assert len(read_table(tmp_path / "data" / "train_sp" / "utt2uniq")) == 15
    # The validator reads every perturbed recording (natively) and checks segments against it.
    assert validate_data_dir(tmp_path / "data" / "train_sp") == []


def test_sox_speed_pipe_is_read_natively_without_sox(data_dir, tmp_path):
    sph = tmp_path / "sw02001.sph"
    value = f"sph2pipe -f wav -p -c 2 {sph} | sox -t wav - -t wav - speed 0.9 |"
    assert parse_wav_scp_entry(value).path is None
    samples, rate = read_recording(value)
    original, _ = read_recording(f"sph2pipe -f wav -p -c 2 {sph} |")
    assert rate == RATE and len(samples) == int(np.ceil(len(original) / 0.9))
    # A 1000 Hz tone played at 0.9 speed is a 900 Hz tone.
    spectrum = np.abs(np.fft.rfft(samples[2000:18000] * np.hanning(16000)))
    assert np.fft.rfftfreq(16000, 1 / RATE)[spectrum.argmax()] == pytest.approx(900, abs=1)
    np.testing.assert_allclose(samples, scipy.signal.resample_poly(original, 10, 9), atol=1e-6)

    fast, _ = read_recording(f"sox -t wav {tmp_path / 'extra.wav'} -t wav - speed 1.1 |")
    assert len(fast) == int(np.ceil(16000 / 1.1))


def test_pipe_parsing_and_speed_change():
    assert sox_speed_pipe("cat a.wav | sox -t wav - -t wav - speed 1.1") == ("cat a.wav |", 1.1)
    assert sox_speed_pipe("sox -t wav /x/a.wav -t wav - speed 0.9 |") == ("/x/a.wav", 0.9)
    assert sox_speed_pipe("sox a.wav -t wav - remix 1") is None
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    assert change_speed(x, 1.0) is x
    assert len(change_speed(x, 0.9)) == 1112 and change_speed(x, 1.1).dtype == np.float32


def test_a_perturbed_dir_is_made_again_only_when_its_source_or_the_factors_changed(data_dir, tmp_path, caplog):
    out = tmp_path / "data" / "train_sp"

    def perturbed(*args: str) -> bool:
        caplog.clear()
        with caplog.at_level("INFO", logger="asr.data.perturb"):
            assert main([str(data_dir), *args]) == 0
        return "perturbing (" in caplog.text

    assert perturbed() and (out / "perturb.record.json").is_file()
    assert not perturbed() and f"{out}: perturbed already" in caplog.text
    text = data_dir / "text"
    text.write_text(text.read_text().replace("more words", "more and more words"))
    assert perturbed() and f"{text} changed since the perturb stage read it" in caplog.text
    assert read_data_dir(out).text["sp1.1-x-extra_000000-000150"] == "more and more words"
    assert perturbed("--factors", "0.9", "1.0") and "perturb options changed" in caplog.text
    assert not perturbed("--factors", "0.9", "1.0")
    (out / "perturb.record.json").unlink()
    assert perturbed("--factors", "0.9", "1.0")
