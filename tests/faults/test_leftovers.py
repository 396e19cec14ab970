"""The smaller defects: a killed features stage's temporary directory is removed by the next run,
prepare fails when too many recordings are unreadable, and utterances with an empty transcript
are left out of training (not trained on as empty targets). A done stage whose overrides changed
is tested with the stage runner (tests/recipes/test_recipe_sh.py)."""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest
from omegaconf import OmegaConf

from asr.data.config import DataConfig
from asr.data.prepare import prepare_data
from asr.features.logmel.extract import extract_set
from asr.features.featureset import feature_set_dir
from asr.text.tokenizer import Tokenizer, tokenizer_model_path
from asr.train.data import CtcDataset
from asr.utils.errors import InputError
from tests.data.conftest import build_ldc_tree
from tests.faults.conftest import fbank_options, features_overrides, tone, write_wav_data_dir
from tests.fixtures.toy_corpus import make_toy_experiment


def test_a_killed_features_stage_leaves_nothing_the_next_run_keeps(tmp_path, caplog):
    data = write_wav_data_dir(tmp_path, {f"sw0200{i}-A": tone(2.0, i) for i in range(1, 4)})
    for name in ("dev", "eval"):
        write_wav_data_dir(tmp_path, {f"{name}-A": tone(0.5)}, name)
    wav_scp = (data / "wav.scp").read_text()
    key, path = wav_scp.splitlines()[2].split(maxsplit=1)
    # The last recording takes a minute to arrive, so the stage is surely inside its temporary dir.
    (data / "wav.scp").write_text(wav_scp.replace(f"{key} {path}\n", f"{key} sleep 60; cat {shlex.quote(path)} |\n"))
    out = tmp_path / "feats" / "logmel40"
    stage = subprocess.Popen(
        [sys.executable, "-m", "asr.features", *features_overrides(tmp_path)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 120
        while not list(out.glob(".train.tmp.*")) and time.time() < deadline and stage.poll() is None:
            time.sleep(0.1)
        left = list(out.glob(".train.tmp.*"))
    finally:
        os.killpg(stage.pid, signal.SIGKILL)  # kill -9, the sleeping command included
        stage.wait()
    assert len(left) == 1 and left[0].is_dir(), "the stage never reached its temporary directory"
    (data / "wav.scp").write_text(wav_scp)

    with caplog.at_level(logging.WARNING):
        summary = extract_set(data, out / "train", fbank_options())
    assert not left[0].exists() and not list(out.glob(".*"))
    assert f"removed 1 temporary file(s) of {out / 'train'} left by a killed process: {left[0].name}" in caplog.text
    assert summary.utterances == 3


@pytest.fixture
def ldc_with_damage(tmp_path):
    tree = build_ldc_tree(tmp_path / "ldc")
    sph = tree.swbd_dir / "swb1_d1/data/sw02001.sph"  # both sides; the one other side with speech is sw02005-A
    sph.write_bytes(sph.read_bytes()[: sph.stat().st_size // 3])  # truncated copy
    return tree


def config(tree, out, **overrides):
    cfg = DataConfig(
        name="t",
        swbd_dir=str(tree.swbd_dir),
        ms98_dir=str(tree.ms98_dir),
        eval2000_dir=str(tree.eval2000_dir),
        eval2000_text_dir=str(tree.eval2000_text_dir),
        fisher_dirs=[],
        data_dir=str(out),
        dev_utts=1,
        expected_sph_files=3,
        prepare_sets=["train", "dev"],
        **overrides,
    )
    return OmegaConf.structured(cfg)


def test_prepare_fails_when_too_many_recordings_are_unreadable(ldc_with_damage, tmp_path, caplog):
    with pytest.raises(
        InputError,
        match=r"^2 of 3 recordings are unreadable \(67%, more than data.max_unreadable=0.05\), "
        r"the first sw02001-A: .*truncated",
    ):
        prepare_data(config(ldc_with_damage, tmp_path / "data"))
    assert not (tmp_path / "data").exists()
    with caplog.at_level(logging.WARNING):  # a share the user accepts: those are dropped, and named
        written = prepare_data(config(ldc_with_damage, tmp_path / "data", max_unreadable=0.7))
    assert "recording sw02001-A is unreadable, its utterances are dropped" in caplog.text
    assert not any("sw02001" in line for line in (written["train"] / "wav.scp").read_text().splitlines())


def test_empty_transcripts_are_left_out_of_training_and_named(tmp_path, caplog):
    cfg = make_toy_experiment(tmp_path, num_train=12, num_dev=4)
    text = tmp_path / "data" / "train" / "text"
    lines = text.read_text().splitlines()
    empty = lines[4].split()[0]
    lines[4] = empty
    text.write_text("\n".join(lines) + "\n")
    tokenizer = Tokenizer(tokenizer_model_path(cfg.tokenizer))
    with caplog.at_level(logging.INFO):
        dataset = CtcDataset(feature_set_dir(cfg, "train"), tmp_path / "data" / "train", tokenizer, subsample=2)
    assert empty not in dataset.utts and len(dataset) == 11
    assert all(len(dataset[i][2]) > 0 for i in range(len(dataset)))
    assert f"1 utterances with an empty transcript left out (python -m asr.data.fix drops them): {empty}" in caplog.text
