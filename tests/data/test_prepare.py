"""Corpus preparation on the fake LDC tree: exact ids, segments, text and wav.scp; the
prepare stage end to end; preflight errors."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from asr.data.config import DataConfig
from asr.data.datadir import read_data_dir, write_data_dir
from asr.data.hub5 import extend_segments, prepare_eval2000
from asr.data.prepare import preflight, prepare_data
from asr.data.stm import fix_stm
from asr.data.swbd import prepare_swbd
from asr.data.validate import validate_data_dir
from asr.kaldi.segments import Segment
from asr.utils.errors import InputError
from tests.data.conftest import LdcTree

REPO = Path(__file__).resolve().parents[2]


def data_config(tree, out: Path, **overrides) -> OmegaConf:
    cfg = DataConfig(
        name="fake",
        swbd_dir=str(tree.swbd_dir),
        ms98_dir=str(tree.ms98_dir),
        eval2000_dir=str(tree.eval2000_dir),
        eval2000_text_dir=str(tree.eval2000_text_dir),
        data_dir=str(out),
        dev_utts=2,
        expected_sph_files=3,
        fisher_dirs=[],
    )
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return OmegaConf.structured(cfg)


# --- Switchboard ---


def test_swbd_utterances_exact(ldc_tree):
    d = prepare_swbd(ldc_tree.swbd_dir, ldc_tree.ms98_dir, expected_sph_files=3)
    assert d.utts == [
        "sw02001-A_000098-001156",
        "sw02001-A_001156-001528",
        "sw02001-B_000250-000613",
        "sw02001-B_000613-000999",
        "sw02005-A_000050-000400",
        "sw02005-A_001000-001230",
    ]
    assert d.text["sw02001-A_000098-001156"] == "hi um yeah i'd like to talk about how you dress for work"
    assert d.text["sw02001-A_001156-001528"] == "[noise] well i guess it's ab- yuppiedom them [vocalized-noise]"
    assert d.text["sw02001-B_000250-000613"] == "[laughter] it'n that -pected"
    assert d.segments["sw02001-A_000098-001156"] == Segment("sw02001-A", 0.98, 11.56)
    assert d.utt2spk["sw02001-B_000613-000999"] == "sw02001-B"
    sph = (ldc_tree.swbd_dir / "swb1_d1/data/sw02001.sph").resolve()
    assert d.wav_scp["sw02001-A"] == f"sph2pipe -f wav -p -c 1 {sph} |"
    assert d.wav_scp["sw02001-B"] == f"sph2pipe -f wav -p -c 2 {sph} |"
    assert d.reco2file_and_channel == {
        "sw02001-A": ("sw02001", "A"),
        "sw02001-B": ("sw02001", "B"),
        "sw02005-A": ("sw02005", "A"),
    }


def test_swbd_times_round_half_up_as_kaldi(ldc_tree):
    # 6.125 s -> 613 cs (Kaldi's int(100*t+0.5)); Python's round() would say 612.
    d = prepare_swbd(ldc_tree.swbd_dir, ldc_tree.ms98_dir, expected_sph_files=3)
    assert d.segments["sw02001-B_000250-000613"] == Segment("sw02001-B", 2.50, 6.13)


def test_swbd_upper_case_sph_found_and_overshoot_clipped(ldc_tree):
    d = prepare_swbd(ldc_tree.swbd_dir, ldc_tree.ms98_dir, expected_sph_files=3)
    assert d.wav_scp["sw02005-A"].endswith("swb1_d2/data/SW02005.SPH |")
    # MS98 says 12.30 s but the file holds 12.00 s: clipped like Kaldi's extract-segments (< 0.5 s)
    assert d.segments["sw02005-A_001000-001230"] == Segment("sw02005-A", 10.00, 12.00)


def test_swbd_skips_are_counted_and_named(ldc_tree, caplog):
    with caplog.at_level(logging.INFO, logger="asr.data"):
        d = prepare_swbd(ldc_tree.swbd_dir, ldc_tree.ms98_dir, expected_sph_files=5)
    log = caplog.text
    assert "found 3 SPHERE files, 2 fewer than the 5 expected" in log
    assert "skipped 1 transcript sides with no audio file: sw02007-A" in log
    assert "skipped 2 audio sides with no transcript: sw02010-A, sw02010-B" in log
    assert "dropped 4 transcript lines: empty after normalisation" in log
    assert "skipped 1 sides with no speech left after normalisation: sw02005-B" in log
    assert sorted(d.wav_scp) == ["sw02001-A", "sw02001-B", "sw02005-A"]


def test_swbd_missing_corpus_lists_layout(tmp_path):
    with pytest.raises(InputError) as err:
        prepare_swbd(tmp_path / "LDC97S62", tmp_path / "swb_ms98_transcriptions")
    message = str(err.value)
    assert f"{tmp_path / 'LDC97S62'}: Switchboard-1 audio directory (LDC97S62) not found" in message
    assert f"{tmp_path / 'swb_ms98_transcriptions'}: MS98 transcript directory" in message
    assert "swb1_d{1,2,3,4}/data/sw0NNNN.sph" in message


def test_swbd_malformed_transcript_line_names_file_and_line(ldc_copy):
    path = ldc_copy.ms98_dir / "20/2001/sw2001B-ms98-a-trans.text"
    path.write_text(path.read_text() + "sw2001B-ms98-a-0004 ten 12.0 hello\n")
    with pytest.raises(InputError, match=rf"{path}:4: expected"):
        prepare_swbd(ldc_copy.swbd_dir, ldc_copy.ms98_dir)


# --- Hub5-2000 ---


def test_eval2000_exact(ldc_tree):
    d = prepare_eval2000(ldc_tree.eval2000_dir, ldc_tree.eval2000_text_dir)
    # 2.30 s * 100 = 229.999..., truncated by Kaldi's awk %06d to 229: we give the same id.
    assert d.utts == [
        "en_4156-A_030185-030248",
        "en_4156-B_010000-010150",
        "sw_4390-A_000050-000229",
        "sw_4390-A_000240-000400",
    ]
    assert d.text == {
        "en_4156-A_030185-030248": "he is a police officer",
        "en_4156-B_010000-010150": "oh really",
        "sw_4390-A_000050-000229": "i think so uh-",
        "sw_4390-A_000240-000400": "yeah okay",
    }
    # widened by 0.1 s (half the 0.1 s gap between the two sw_4390-A segments)
    assert d.segments == {
        "en_4156-A_030185-030248": Segment("en_4156-A", 301.75, 302.58),
        "en_4156-B_010000-010150": Segment("en_4156-B", 99.90, 101.60),
        "sw_4390-A_000050-000229": Segment("sw_4390-A", 0.40, 2.35),
        "sw_4390-A_000240-000400": Segment("sw_4390-A", 2.35, 4.10),
    }
    sph = (ldc_tree.eval2000_dir / "english/en_4156.sph").resolve()
    assert d.wav_scp["en_4156-B"] == f"sph2pipe -f wav -p -c 2 {sph} |"
    assert "sw_4390-B" not in d.wav_scp  # its segments: one ignored, one only (%HESITATION)
    assert d.reco2file_and_channel["en_4156-A"] == ("en_4156", "A")
    assert d.utt2spk["sw_4390-A_000050-000229"] == "sw_4390-A"


def test_eval2000_stm_fixed_and_glm_copied(ldc_tree):
    d = prepare_eval2000(ldc_tree.eval2000_dir, ldc_tree.eval2000_text_dir)
    stm = d.verbatim["stm"].splitlines()
    assert stm[2] == "sw_4390 A sw_4390_A 0.50 2.30 <O,en,M,en-M> (%HESITATION) I THINK SO (UH-)"
    assert stm[3] == "sw_4390 A sw_4390_A 2.40 4.00 <O,en,M,en-M>  YEAH (OKAY) "
    assert stm[0].startswith(";;") and len(stm) == 8
    assert d.verbatim["glm"] == (ldc_tree.eval2000_text_dir / "reference/en20000405_hub5.glm").read_text()


def test_fix_stm_rules():
    assert fix_stm("x A x_A 1.0 2.0 <O> ((WHAT) <B_ASIDE>HI<E_ASIDE>\n") == "x A x_A 1.0 2.0 <O> (WHAT) HI\n"


def test_extend_segments_matches_kaldi_examples():
    # the three examples at the end of Kaldi's local/extend_segments.pl, extended by 1.0 s
    segs = {"a1": Segment("A", 0, 1), "a2": Segment("A", 3, 4), "b1": Segment("B", 0, 1), "b2": Segment("B", 2, 3)}
    assert extend_segments(segs, 1.0) == {
        "a1": Segment("A", 0.0, 2.0),
        "a2": Segment("A", 2.0, 5.0),
        "b1": Segment("B", 0.0, 1.5),
        "b2": Segment("B", 1.5, 4.0),
    }
    overlapping = {"a1": Segment("A", 0, 2), "a2": Segment("A", 1, 3)}
    assert extend_segments(overlapping, 1.0) == {"a1": Segment("A", 0.0, 2.0), "a2": Segment("A", 1.0, 4.0)}
    unordered = {"a1": Segment("A", 0, 2), "a2": Segment("A", 5, 6), "a3": Segment("A", 3, 4)}
    assert extend_segments(unordered, 1.0) == {
        "a1": Segment("A", 0.0, 2.5),
        "a2": Segment("A", 4.5, 7.0),
        "a3": Segment("A", 2.5, 4.5),
    }


def test_eval2000_pem_without_stm_line_is_an_error(ldc_copy):
    pem = ldc_copy.eval2000_dir / "english/hub5e_00.pem"
    pem.write_text(pem.read_text() + "en_4156 B unknown_speaker 200.00 201.00\n")
    with pytest.raises(InputError) as err:
        prepare_eval2000(ldc_copy.eval2000_dir, ldc_copy.eval2000_text_dir)
    assert "1 only in the pem (en_4156-B_020000-020100), 0 only in the stm" in str(err.value)
    assert str(pem) in str(err.value)


def test_eval2000_recording_without_audio_skipped(ldc_copy, caplog):
    (ldc_copy.eval2000_dir / "english/sw_4390.sph").unlink()
    with caplog.at_level(logging.WARNING, logger="asr.data"):
        d = prepare_eval2000(ldc_copy.eval2000_dir, ldc_copy.eval2000_text_dir)
    assert d.utts == ["en_4156-A_030185-030248", "en_4156-B_010000-010150"]
    assert "skipped the segments of 2 recordings with no audio file: sw_4390-A, sw_4390-B" in caplog.text


# --- data dir round trip ---


@pytest.mark.parametrize("which", ["swbd", "eval2000"])
def test_write_read_write_identical_bytes(ldc_tree, tmp_path, which):
    if which == "swbd":
        d = prepare_swbd(ldc_tree.swbd_dir, ldc_tree.ms98_dir, expected_sph_files=3)
    else:
        d = prepare_eval2000(ldc_tree.eval2000_dir, ldc_tree.eval2000_text_dir)
    write_data_dir(d, tmp_path / "a")
    write_data_dir(read_data_dir(tmp_path / "a"), tmp_path / "b")
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "b").iterdir())
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


# --- the prepare stage ---


def test_prepare_data_writes_three_valid_sets(ldc_tree, tmp_path):
    written = prepare_data(data_config(ldc_tree, tmp_path / "data"))
    assert written == {
        "train": tmp_path / "data/train",
        "dev": tmp_path / "data/train_dev",
        "eval": tmp_path / "data/eval2000",
    }
    dev, train = read_data_dir(written["dev"]), read_data_dir(written["train"])
    assert dev.utts == ["sw02001-A_000098-001156", "sw02001-A_001156-001528"]  # the first dev_utts=2
    assert train.utts == [
        "sw02001-B_000250-000613",
        "sw02001-B_000613-000999",
        "sw02005-A_000050-000400",
        "sw02005-A_001000-001230",
    ]
    assert sorted(dev.wav_scp) == ["sw02001-A"] and sorted(train.wav_scp) == ["sw02001-B", "sw02005-A"]
    assert train.utt2dur == {
        "sw02001-B_000250-000613": 3.63,
        "sw02001-B_000613-000999": 3.86,
        "sw02005-A_000050-000400": 3.5,
        "sw02005-A_001000-001230": 2.0,
    }
    assert read_data_dir(written["eval"]).utt2dur["en_4156-A_030185-030248"] == 0.83
    assert (written["eval"] / "stm").is_file() and (written["eval"] / "glm").is_file()
    for path in written.values():
        assert validate_data_dir(path) == []


def test_prepare_eval_only_needs_no_switchboard(ldc_tree, tmp_path):
    cfg = data_config(ldc_tree, tmp_path / "data", prepare_sets=["eval"], swbd_dir=str(tmp_path / "none"))
    assert sorted(prepare_data(cfg)) == ["eval"]
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["eval2000"]


def test_prepare_dev_utts_too_large(ldc_tree, tmp_path):
    with pytest.raises(InputError, match="data.dev_utts=6 but Switchboard has 6 utterances"):
        prepare_data(data_config(ldc_tree, tmp_path / "data", dev_utts=6))


def test_preflight_lists_every_missing_path(tmp_path):
    tree = type("T", (), {})()
    tree.swbd_dir, tree.ms98_dir = tmp_path / "LDC97S62", tmp_path / "ms98"
    tree.eval2000_dir, tree.eval2000_text_dir = tmp_path / "hub5e_00", tmp_path / "LDC2002T43"
    (tmp_path / "ms98").mkdir()
    cfg = data_config(tree, tmp_path / "data")
    with pytest.raises(InputError) as err:
        preflight(cfg, ["train", "dev", "eval"])
    lines = [line.strip() for line in str(err.value).splitlines()]
    assert f"{tmp_path / 'LDC97S62'}: Switchboard-1 audio directory (LDC97S62) not found" in lines
    assert (
        f"{tmp_path / 'ms98/NN/NNNN/swNNNNA-ms98-a-trans.text'}: no MS98 *-trans.text files in {tmp_path / 'ms98'}"
        in lines
    )
    assert any(line.startswith(f"{tmp_path / 'hub5e_00/english'}/*.sph: no Hub5-2000 audio") for line in lines)
    assert f"{tmp_path / 'hub5e_00/english/hub5e_00.pem'}: segment file not found" in lines
    assert (
        f"{tmp_path / 'LDC2002T43/reference/hub5e00.english.000405.stm'}: reference transcript (LDC2002T43) not found"
        in lines
    )
    assert f"{tmp_path / 'LDC2002T43/reference/en20000405_hub5.glm'}: scoring GLM (LDC2002T43) not found" in lines


def _run(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_prepare_cli_end_to_end_and_missing_corpus(ldc_tree, tmp_path):
    ok = _run(
        "asr.data.prepare",
        f"synth.out_dir={ldc_tree.root}",
        "data.dev_utts=2",
        "data.expected_sph_files=3",
        f"data.data_dir={tmp_path / 'data'}",
        f"exp_dir={tmp_path / 'exp'}",
        cwd=tmp_path,
    )
    assert ok.returncode == 0, ok.stderr
    assert f"{tmp_path / 'data/train'}: 4 utterances, 2 speakers" in ok.stderr
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["eval2000", "train", "train_dev"]
    bad = _run("asr.data.prepare", f"synth.out_dir={tmp_path / 'nowhere'}", f"exp_dir={tmp_path / 'exp'}", cwd=tmp_path)
    assert bad.returncode == 2
    assert f"{tmp_path / 'nowhere/LDC97S62'}: Switchboard-1 audio directory (LDC97S62) not found" in bad.stderr
    assert f"{tmp_path / 'nowhere/LDC2002T43/reference/en20000405_hub5.glm'}: scoring GLM" in bad.stderr
    assert "Traceback" not in bad.stderr


# --- quirks of the real releases, and SWB-2000 ---


def test_swbd_missing_transcript_side_skipped_or_refused(ldc_copy, caplog):
    (ldc_copy.ms98_dir / "20/2001/sw2001B-ms98-a-trans.text").unlink()
    with caplog.at_level(logging.WARNING, logger="asr.data"):
        d = prepare_swbd(ldc_copy.swbd_dir, ldc_copy.ms98_dir, expected_sph_files=3)
    assert sorted(d.wav_scp) == ["sw02001-A", "sw02005-A"]
    assert "skipped 3 audio sides with no transcript: sw02001-B, sw02010-A, sw02010-B" in caplog.text
    with pytest.raises(InputError) as err:
        prepare_swbd(ldc_copy.swbd_dir, ldc_copy.ms98_dir, expected_sph_files=3, missing_transcript="error")
    message = str(err.value)
    assert "swbd: 3 conversation sides have audio but no transcript:" in message
    assert f"sw02001-B: expected {ldc_copy.ms98_dir / '20/2001/sw2001B-ms98-a-trans.text'}" in message
    assert "data.missing_transcript=skip" in message


def test_swbd_unsorted_transcript_gives_the_same_data_dir(ldc_tree, ldc_copy, caplog):
    path = ldc_copy.ms98_dir / "20/2001/sw2001A-ms98-a-trans.text"
    path.write_text("".join(reversed(path.read_text().splitlines(keepends=True))))
    with caplog.at_level(logging.WARNING, logger="asr.data"):
        shuffled = prepare_swbd(ldc_copy.swbd_dir, ldc_copy.ms98_dir, expected_sph_files=3)
    original = prepare_swbd(ldc_tree.swbd_dir, ldc_tree.ms98_dir, expected_sph_files=3)
    assert f"{path}: 3 lines come before the line above them (Kaldi's sort -c would stop here)" in caplog.text
    assert shuffled.text == original.text and shuffled.segments == original.segments


def test_prepare_swb2000_combines_fisher_and_writes_lm_text(ldc_tree, fisher_tree, tmp_path):
    cfg = data_config(
        ldc_tree,
        tmp_path / "data",
        fisher_dirs=fisher_tree,
        expected_fisher_files=3,
        max_duplicates=300,
        lm_text=str(tmp_path / "data/lm/text"),
    )
    written = prepare_data(cfg)
    train = read_data_dir(written["train"])
    assert train.utts[:5] == [
        "fe_03_00001-A-000738-000877",
        "fe_03_00001-A-001200-001451",
        "fe_03_00001-B-001510-001620",
        "fe_03_05851-A-000050-000225",
        "fe_03_05851-B-000270-000400",
    ]
    assert train.utts[5:] == [
        "sw02001-B_000250-000613",
        "sw02001-B_000613-000999",
        "sw02005-A_000050-000400",
        "sw02005-A_001000-001230",
    ]
    assert read_data_dir(written["dev"]).utts == ["sw02001-A_000098-001156", "sw02001-A_001156-001528"]
    lm = (tmp_path / "data/lm/text").read_text().splitlines()
    assert lm == [train.text[u] for u in train.utts] and lm[0] == "an- so the topic is"
    assert validate_data_dir(written["train"]) == []


def test_preflight_names_missing_fisher(ldc_tree, tmp_path):
    cfg = data_config(ldc_tree, tmp_path / "data", fisher_dirs=[str(tmp_path / "LDC2004T19")])
    with pytest.raises(InputError) as err:
        preflight(cfg, ["train", "dev", "eval"])
    assert f"{tmp_path / 'LDC2004T19'}: Fisher directory not found" in str(err.value)
    assert "fe_03_p{1,2}_tran/data/trans/NNN/fe_03_NNNNN.txt" in str(err.value)
    preflight(cfg, ["dev", "eval"])  # Fisher is only part of the training set


# --- memory ---

SENTENCES = [
    f"so {a} i think that {b} is right"
    for a in ("yeah", "well", "um", "uh-huh")
    for b in ("it", "she", "he", "this", "that")
]


def switchboard_of_size(ldc_tree, root: Path, conversations: int, lines_per_side: int = 50) -> LdcTree:
    """Switchboard with `conversations` conversations (hard links to one SPHERE file) of
    `lines_per_side` utterances a side, and the tiny tree's Hub5-2000."""
    tree = LdcTree(root, root / "LDC97S62", root / "ms98", ldc_tree.eval2000_dir, ldc_tree.eval2000_text_dir)
    (tree.swbd_dir / "swb1_d1/data").mkdir(parents=True)
    for number in range(2001, 2001 + conversations):
        os.link(ldc_tree.swbd_dir / "swb1_d1/data/sw02001.sph", tree.swbd_dir / f"swb1_d1/data/sw0{number}.sph")
        for side in "AB":
            path = tree.ms98_dir / f"{number // 100}/{number}/sw{number}{side}-ms98-a-trans.text"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(
                "".join(
                    f"sw{number}{side}-ms98-a-{i:04d} {0.3 * i:.6f} {0.3 * i + 0.25:.6f} "
                    f"{SENTENCES[(number + i) % len(SENTENCES)]}\n"
                    for i in range(lines_per_side)
                )
            )
    return tree


MEASURE_PREPARE = """
import sys, tracemalloc
from omegaconf import OmegaConf
import asr.data.prepare as prepare
prepare.validate_data_dir = lambda path: []  # the validator's own memory is measured apart
warm_up, measured = (OmegaConf.load(path) for path in sys.argv[1:])
prepare.prepare_data(warm_up)  # imports and caches
tracemalloc.start()
prepare.prepare_data(measured)
print(tracemalloc.get_traced_memory()[1])
"""


def traced_peak(tree, out: Path, conversations: int, warm_up_tree) -> int:
    """Prepare's traced peak in an interpreter of its own, as the stage runs (what earlier
    tests imported and left behind changed it in this one: 0.8 KB per utterance more after some)."""
    configs = []
    for name, source, size in (("warm-up", warm_up_tree, 3), ("measured", tree, conversations)):
        cfg = data_config(
            source,
            out.with_name(f"{out.name}-{name}"),
            prepare_sets=["train", "dev"],
            dev_utts=100 if name == "measured" else 2,
            expected_sph_files=size,
            max_duplicates=300,
            lm_text=str(out.with_name(f"{out.name}-{name}") / "lm/text"),
        )
        configs.append(out.with_name(f"{out.name}-{name}.yaml"))
        OmegaConf.save(cfg, configs[-1])
    proc = subprocess.run(
        [sys.executable, "-c", MEASURE_PREPARE, *map(str, configs)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return int(proc.stdout.split()[-1])


def test_prepare_memory_does_not_grow_with_the_utterances(ldc_tree, tmp_path):
    # SWB-2000 has 2.2 million utterances: the stage holds what is per recording, speaker or
    # distinct transcript, never what is per utterance (the original held ~1.6 KB each).
    small, large = 10, 60
    trees = {n: switchboard_of_size(ldc_tree, tmp_path / f"ldc{n}", n) for n in (small, large)}
    peaks = [traced_peak(trees[n], tmp_path / f"data{n}", n, ldc_tree) for n in (small, large)]
    assert len((tmp_path / f"data{large}-measured/lm/text").read_text().splitlines()) == large * 100 - 100
    per_utterance = (peaks[1] - peaks[0]) / ((large - small) * 100)
    assert per_utterance < 300, f"peak grew {per_utterance:.0f} B per utterance ({peaks[0]} -> {peaks[1]} B)"


def test_prepare_skips_the_sets_its_records_match_and_reruns_what_changed(ldc_copy, tmp_path, caplog):
    """Each set's record (data/<set>/prepare.record.json) names its options and corpus texts:
    a second run prepares nothing; an edited transcript, an option of one set, or a record
    gone with its data dir prepares exactly the sets concerned; an edited data dir stays."""
    cfg = data_config(ldc_copy, tmp_path / "data")
    written = prepare_data(cfg)
    records = {role: path / "prepare.record.json" for role, path in written.items()}
    assert all(r.is_file() for r in records.values())
    text = written["train"] / "text"
    text.write_text(text.read_text().replace("\n", " and\n", 1))  # the user's edit of the data dir
    edited = text.read_text()

    def prepared(cfg) -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="asr.data.prepare"):
            assert prepare_data(cfg) == written
        return sorted(role for role, path in written.items() if f"{path}: preparing (" in caplog.text)

    assert prepared(cfg) == [] and text.read_text() == edited
    assert f"{written['eval']}: prepared already ({records['eval']}), skipping" in caplog.text

    transcript = sorted(ldc_copy.ms98_dir.rglob("*-trans.text"))[0]
    transcript.write_text(transcript.read_text().replace(" hi um ", " hello um "))  # a corrected transcript
    assert prepared(cfg) == ["dev", "train"]
    assert f"{transcript} changed since the prepare stage read it" in caplog.text

    assert prepared(data_config(ldc_copy, tmp_path / "data", max_duplicates=300)) == ["train"]
    assert "prepare options changed" in caplog.text and "max_duplicates: 0 -> 300" in caplog.text

    shutil.rmtree(written["eval"])  # a data dir removed takes its record with it
    assert prepared(data_config(ldc_copy, tmp_path / "data", max_duplicates=300)) == ["eval"]
    assert f"{records['eval']}: no record of a finished prepare stage" in caplog.text
