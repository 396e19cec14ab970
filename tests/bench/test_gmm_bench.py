"""The GMM benchmark's arithmetic and figure (the stages it runs have their own tests:
tests/gmm, tests/lang)."""

import subprocess
import sys

from asr.bench.gmm import LAST_PEAK_MB, TRAINING_HOURS, audio_seconds, entry, graph_size, plot, projection


def test_rtf_is_cpu_seconds_per_second_of_audio(tmp_path):
    (tmp_path / "utt2num_frames").write_text("a 300\nb 200\n\n")
    audio = audio_seconds(tmp_path)
    assert audio == 5.0
    LAST_PEAK_MB[0] = 123.0
    stage = entry(0.5, 2.0, audio, passes=3)
    assert stage == {
        "cpu_seconds": 0.5,
        "wall_seconds": 2.0,
        "audio_seconds": 5.0,
        "rtf": 0.1,
        "frames_per_second_per_core": 1000.0,  # 500 frames in 0.5 CPU seconds
        "peak_memory_mb": 123.0,
        "passes": 3,
    }
    assert graph_size({"HCLG_states": 7, "HCLG_arcs": 9, "seconds": 1.0}) == {"HCLG_states": 7, "HCLG_arcs": 9}


def test_the_projection_is_the_ladders_rtf_times_the_corpus_audio_over_the_cores():
    stages = {
        "mono_train": {"rtf": 0.01},
        "sat_align": {"rtf": 0.002},
        "tri_decode": {"rtf": 5.0},
    }  # decoding: not training
    report = projection(stages)
    assert report["stages"] == ["mono_train", "sat_align"]
    assert report["ladder_rtf"] == 0.012
    assert report["hours"]["swb300"]["16"] == round(0.012 * TRAINING_HOURS["swb300"] / 16, 2)
    assert report["hours"]["swb2000"]["64"] == round(0.012 * 2000 / 64, 2)


def test_the_figure_has_a_bar_per_stage(tmp_path):
    stages = {name: entry(1.0, 1.0, 100.0 * (i + 1)) for i, name in enumerate(["mono_train", "tri_decode"])}
    report = {"stages": stages, "settings": {"train_set": "train_dev", "decode_set": "eval2000", "nj": 1}}
    plot(report, tmp_path / "gmm.png")
    assert (tmp_path / "gmm.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_it_is_listed():
    out = subprocess.run([sys.executable, "-m", "asr.bench", "--help"], capture_output=True, text=True, check=True)
    assert "gmm " in out.stdout and "GMM-HMM ladder" in out.stdout
