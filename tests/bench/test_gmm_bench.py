"""The GMM benchmark's arithmetic and figure (the stages it runs have their own tests:
tests/gmm, tests/lang)."""

import subprocess
import sys

from asr.bench.gmm import audio_seconds, entry, graph_size, plot


def test_rtf_is_cpu_seconds_per_second_of_audio(tmp_path):
    (tmp_path / "utt2num_frames").write_text("a 300\nb 200\n\n")
    audio = audio_seconds(tmp_path)
    assert audio == 5.0
    stage = entry(0.5, 2.0, audio, passes=3)
    assert stage == {"cpu_seconds": 0.5, "wall_seconds": 2.0, "audio_seconds": 5.0, "rtf": 0.1, "passes": 3}
    assert graph_size({"HCLG_states": 7, "HCLG_arcs": 9, "seconds": 1.0}) == {"HCLG_states": 7, "HCLG_arcs": 9}


def test_the_figure_has_a_bar_per_stage(tmp_path):
    stages = {name: entry(1.0, 1.0, 100.0 * (i + 1)) for i, name in enumerate(["mono_train", "tri_decode"])}
    report = {"stages": stages, "settings": {"train_set": "train_dev", "decode_set": "eval2000", "nj": 1}}
    plot(report, tmp_path / "gmm.png")
    assert (tmp_path / "gmm.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_it_is_listed():
    out = subprocess.run([sys.executable, "-m", "asr.bench", "--help"], capture_output=True, text=True, check=True)
    assert "gmm " in out.stdout and "GMM-HMM stages" in out.stdout
