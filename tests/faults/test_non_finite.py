"""NaN and inf in features: the features stage never writes them (it skips the utterance, with a
count and a list), the feature reader refuses them naming the utterance, decoding skips them
(listed, scored as deletions) and refuses a model whose outputs are not finite, and training
stops naming the utterance instead of logging NaN dev losses and never writing best.pt."""

from __future__ import annotations

import logging
from pathlib import Path

import kaldiio
import numpy as np
import pytest
import torch

from asr.data.datadir import read_data_dir
from asr.decode.stage import decode_set
from asr.features import cmvn
from asr.features.logmel.extract import extract_set
from asr.features.featureset import FeatureReader, NonFiniteFeatures, feature_set_dir
from asr.kaldi.table import read_table
from asr.models.blstm import build_model
from asr.text.tokenizer import Tokenizer, tokenizer_model_path
from asr.train.data import CtcDataset
from asr.train.loop import train
from asr.utils.errors import InputError
from tests.faults.conftest import fbank_options, tone, write_wav_data_dir
from tests.fixtures.toy_corpus import FEAT_DIM, make_toy_experiment

torch.set_num_threads(1)


def test_features_stage_skips_non_finite_matrices_with_a_count_and_a_list(tmp_path, caplog):
    samples = {f"sw0200{i}-A": tone(1.0, i) for i in range(1, 5)}
    samples["sw02002-A"][4000] = np.inf
    samples["sw02003-A"][100:200] = np.nan
    data = write_wav_data_dir(tmp_path, samples)
    out = tmp_path / "feats" / "train"
    with caplog.at_level(logging.WARNING):
        summary = extract_set(data, out, fbank_options(), cmvn_unit="speaker")
    assert (summary.utterances, summary.skipped_utterances) == (2, 2)
    skipped = read_table(out / "skipped")
    assert sorted(skipped) == ["sw02002-A", "sw02003-A"] and all("non-finite values" in r for r in skipped.values())
    assert f"2 utterances skipped, each listed with its reason in {out / 'skipped'}" in caplog.text
    feats = kaldiio.load_scp(str(out / "feats.scp"))
    assert sorted(feats) == ["sw02001-A", "sw02004-A"] and all(np.isfinite(feats[u]).all() for u in feats)
    stats = cmvn.read_stats(out / "cmvn.scp")
    assert all(np.isfinite(s).all() for s in stats.values())  # the skipped ones did not poison the statistics


def write_features(feats_dir, mats: dict[str, np.ndarray]) -> None:
    """feats.ark/scp, feat_dim, utt2num_frames and per-utterance CMVN, as the features stage lays them out."""
    feats_dir.mkdir(parents=True, exist_ok=True)
    with kaldiio.WriteHelper(f"ark,scp:{feats_dir / 'feats.ark'},{feats_dir / 'feats.scp'}") as writer:
        for utt in sorted(mats):
            writer(utt, mats[utt])
    (feats_dir / "feat_dim").write_text(f"{FEAT_DIM}\n")
    (feats_dir / "utt2num_frames").write_text("".join(f"{u} {len(m)}\n" for u, m in sorted(mats.items())))
    finite = {
        u: np.nan_to_num(m, nan=0.0, posinf=0.0, neginf=0.0) for u, m in mats.items()
    }  # the statistics stay finite
    cmvn.write_stats(cmvn.compute_stats("utterance", finite, {u: u for u in mats}), feats_dir, "utterance")


def poison(cfg, set_name: str, utt_index: int, value: float) -> str:
    """Put `value` into one frame of one utterance of a toy set; returns that utterance."""
    feats_dir = feature_set_dir(cfg, set_name)
    mats = {u: np.array(m) for u, m in kaldiio.load_scp(str(feats_dir / "feats.scp")).items()}
    utt = sorted(mats)[utt_index]
    mats[utt][3, 1] = value
    write_features(feats_dir, mats)
    return utt


@pytest.fixture
def toy(tmp_path):
    cfg = make_toy_experiment(tmp_path, num_train=12, num_dev=4)
    return cfg, Tokenizer(tokenizer_model_path(cfg.tokenizer))


def test_reader_refuses_a_non_finite_matrix_naming_the_utterance(toy):
    cfg, tokenizer = toy
    bad = poison(cfg, "train", 2, np.nan)
    data = read_data_dir(f"{cfg.data.data_dir}/train")
    reader = FeatureReader(feature_set_dir(cfg, "train"), data.utt2spk)
    with pytest.raises(NonFiniteFeatures, match=rf"feats.scp: utterance '{bad}': NaN/inf values in its features"):
        reader(bad)
    assert all(torch.isfinite(reader(u)).all() for u in reader.utts() if u != bad)
    dataset = CtcDataset(feature_set_dir(cfg, "train"), Path(cfg.data.data_dir) / "train", tokenizer, subsample=2)
    with pytest.raises(NonFiniteFeatures):  # a training item, as the loader reads it
        dataset[dataset.utts.index(bad)]


def test_decoding_skips_a_non_finite_utterance_and_lists_it(toy, caplog):
    cfg, tokenizer = toy
    bad = poison(cfg, "eval", 1, np.inf)
    torch.manual_seed(0)
    model = build_model(cfg.model, FEAT_DIM, tokenizer.vocab_size).eval()
    with caplog.at_level(logging.WARNING):
        out = decode_set(cfg, "eval", model, tokenizer, torch.device("cpu"))
    hyps = read_table(out / "hyp.txt", allow_empty_value=True)
    assert bad not in hyps and len(hyps) == 3  # scored as deletions, never an empty hypothesis
    assert list(read_table(out / "skipped")) == [bad]
    assert (
        f"eval: 1 utterances not decoded (NaN/inf features; scored as deletions), listed in {out / 'skipped'}"
        in caplog.text
    )


def test_decoding_refuses_a_model_with_non_finite_outputs(toy):
    cfg, tokenizer = toy
    model = build_model(cfg.model, FEAT_DIM, tokenizer.vocab_size).eval()
    with torch.no_grad():
        next(model.parameters()).fill_(float("nan"))
    with pytest.raises(InputError, match="the model gives NaN/inf outputs .* the checkpoint is broken"):
        decode_set(cfg, "eval", model, tokenizer, torch.device("cpu"))


def test_training_stops_naming_a_non_finite_dev_utterance(toy):
    cfg, _ = toy
    bad = poison(cfg, "dev", 0, np.inf)
    with pytest.raises(InputError, match=rf"utterance '{bad}': NaN/inf values in its features"):
        train(cfg)
