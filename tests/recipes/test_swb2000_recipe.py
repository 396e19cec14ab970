"""recipes/swb2000 end to end on the tiny synthetic LDC tree (Switchboard + Fisher parts 1 and 2 in
both LDC namings, every release quirk): the combined training set, Switchboard dev set, LM text,
and the decoded and scored Hub5-2000."""

from __future__ import annotations

import shlex

import json

import pytest

from asr.data.datadir import read_data_dir
from asr.data.validate import validate_data_dir
from tests.recipes.conftest import Recipe, done_stages
from tests.fixtures.swb_corpus import quirky_corpus, swb_recipe

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def swb2000():
    return swb_recipe("swb2000")


def test_every_stage_done_and_its_output_valid(swb2000):
    done = done_stages(swb2000.dir / "exp/tiny")
    assert done == [
        "0.prepare",
        "1.validate",
        "2.features",
        "3.tokenizer",
        "4.lm",
        "5.train",
        "6.tune",
        "7.decode",
        "7.decode_greedy",
        "8.score",
        "8.score_greedy",
    ]
    for name in ("train_nodup", "train_dev", "eval2000"):
        assert validate_data_dir(swb2000.dir / "data" / name) == [], name
    wer = json.loads((swb2000.dir / "exp/tiny/decode_eval2000/wer.json").read_text())
    assert wer["swb"]["words"] > 0 and wer["callhome"]["words"] > 0 and wer["total"]["wer"] >= 0


def test_training_set_is_fisher_plus_switchboard_and_dev_is_switchboard(swb2000):
    train = read_data_dir(swb2000.dir / "data/train_nodup")
    dev = read_data_dir(swb2000.dir / "data/train_dev")
    fisher_sides = {s for s in train.wav_scp if s.startswith("fe_03_")}
    assert {s[:11] for s in fisher_sides} == {"fe_03_00001", "fe_03_05851"}  # part 1 and part 2
    assert any(s.startswith("sw0") for s in train.wav_scp)
    assert all(s.startswith("sw0") for s in dev.wav_scp) and len(dev.utt2spk) == 20
    texts = " ".join(train.text[u] for u in train.utts if u.startswith("fe_03_"))
    assert "[laugh]" not in texts and "((" not in texts and "[mn]" not in texts
    lm = (swb2000.dir / "data/lm/text").read_text().splitlines()
    assert len(lm) >= len(train.utt2spk)  # before the duplicate cap
    log = (swb2000.dir / "exp/tiny/log/prepare.log").read_text()
    assert "fisher: dropped" in log and "uncertain transcription" in log
    assert "of the release's 16 folders not found" in log


def test_fisher_dir_options_become_one_list_override(swb2000):
    cmd = shlex.split((swb2000.dir / "exp/tiny/.done/0.prepare.cmd").read_text())
    root = str(quirky_corpus()).replace("'", "\\'")  # Hydra's quoted form
    assert f"data.fisher_dirs=['{root}/LDC2004T19','{root}/LDC2005T19','{root}/LDC2004S13','{root}/LDC2005S13']" in cmd
    assert "data=swb2000" in cmd


def test_missing_fisher_refused_before_any_work(tmp_path):
    recipe = Recipe(tmp_path, "swb2000")
    root = quirky_corpus()
    proc = recipe.run(
        "--exp",
        "x",
        "--swbd-dir",
        str(root / "LDC97S62"),
        "--ms98-dir",
        str(root / "swb_ms98_transcriptions"),
        "--eval2000-dir",
        str(root / "LDC2002S09/hub5e_00"),
        "--eval2000-text-dir",
        str(root / "LDC2002T43"),
        check=False,
    )
    assert proc.returncode != 0
    assert "data.fisher_dirs: required for SWB-2000" in proc.stderr
    assert not (recipe.dir / "data").exists()
