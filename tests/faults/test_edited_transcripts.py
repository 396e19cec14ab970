"""Issue 33, item 1: one skip-if-done rule, the stage record. Editing data/train/text re-runs
exactly the stages downstream of it: the tokenizer, the LM and training; not the features
(which read the audio, not the text). The stages are called as their entry points call them
(build_tokenizer, build_lms, make_features, train), in this process: a subprocess per stage
would cost about 2 s of CPU each for importing torch."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from asr.config import load_config
from asr.features.recipes import make_features
from asr.lm import tools
from asr.lm.build import binary_path, build_lms
from asr.text.tokenizer import build_tokenizer, tokenizer_model_path
from asr.train import loop
from asr.utils.errors import InputError
from tests.faults.conftest import features_overrides, tone, write_wav_data_dir

try:
    tools.kenlm_tool("lmplz")
    HAVE_KENLM = True
except InputError:
    HAVE_KENLM = False


def run_stages(cfg) -> dict[str, int]:
    """Every stage in recipe order; returns the mtime of each stage's main output."""
    make_features(cfg)
    build_tokenizer(f"{cfg.data.data_dir}/train/text", cfg.tokenizer)
    if HAVE_KENLM:
        build_lms(cfg)
    loop.train(cfg)
    outputs = {
        "features": f"{cfg.features.feats_dir}/{cfg.features.name}/train/feats.ark",
        "tokenizer": tokenizer_model_path(cfg.tokenizer),
        "train": f"{cfg.exp_dir}/checkpoints/last.pt",
    }
    if HAVE_KENLM:
        outputs["lm"] = binary_path(cfg.lm.dir, 2)
    return {stage: Path(path).stat().st_mtime_ns for stage, path in outputs.items()}


@pytest.fixture
def corpus(tmp_path):
    for offset, name in enumerate(("train", "dev", "eval")):
        write_wav_data_dir(tmp_path, {f"rec{offset}{i}": tone(0.6, seed=offset * 3 + i) for i in range(3)}, name)
    return tmp_path


def test_an_edited_transcript_reruns_tokenizer_lm_and_training_not_features(corpus, caplog):
    cfg = load_config(
        features_overrides(
            corpus,
            "features.num_mel_bins=23",
            f"tokenizer.lang_dir={corpus / 'lang'}",
            "tokenizer=char",
            "tokenizer.vocab_size=30",
            "lm.orders=[2]",
            "lm.decode_order=2",
            "lm.perplexity_sets=[]",
            "model.num_layers=1",
            "model.hidden_size=8",
            "train.epochs=1",
            "train.threads=1",
            "device=cpu",
        )
    )
    first = run_stages(cfg)
    assert run_stages(cfg) == first  # nothing changed: every stage skips
    text = corpus / "data" / "train" / "text"
    text.write_text(text.read_text().replace("yes", "yes indeed"))
    with caplog.at_level(logging.INFO):
        again = run_stages(cfg)
    assert again["features"] == first["features"]
    assert all(again[stage] != first[stage] for stage in again if stage != "features")
    assert f"{text} changed since the tokenizer stage read it" in caplog.text
    assert (corpus / "exp" / "previous" / "1" / "checkpoints" / "last.pt").is_file()  # the old model, kept


def test_an_unfinished_training_on_an_edited_transcript_is_refused(corpus):
    from asr.train.experiment import restart_if_inputs_changed, save_config

    cfg = load_config(features_overrides(corpus, f"tokenizer.lang_dir={corpus / 'lang'}"))
    save_config(cfg.exp_dir, cfg)  # what a training writes once it has started
    text = corpus / "data" / "train" / "text"
    text.write_text(text.read_text() + "zz 1\n")
    with pytest.raises(InputError, match=rf"^{text} changed since the train stage read it .*train.restart=true"):
        restart_if_inputs_changed(cfg.exp_dir, cfg)
