"""Training dataset: CMVN-normalised features, token targets, filtering, collation."""

import shutil

import numpy as np
import pytest
import torch
from tests.fixtures.toy_corpus import FEAT_DIM, make_toy_experiment

from asr.features.featureset import feature_set_dir, read_feat_dim
from asr.text.tokenizer import Tokenizer, tokenizer_model_path
from asr.train.data import CtcDataset, collate
from asr.train.index import ctc_min_frames
from asr.utils.errors import InputError

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    cfg = make_toy_experiment(root, num_train=12, num_dev=4)
    return root, cfg, Tokenizer(tokenizer_model_path(cfg.tokenizer))


def test_items_are_normalised_features_and_tokens(toy):
    root, cfg, tok = toy
    ds = CtcDataset(feature_set_dir(cfg, "train"), root / "data" / "train", tok, subsample=2)
    assert len(ds) == 12 and ds.feat_dim == FEAT_DIM
    utt, feats, tokens = ds[3]
    assert utt == ds.utts[3] and feats.shape == (ds.num_frames[3], FEAT_DIM)
    # The toy set has global CMVN: zero mean, unit variance over all its frames.
    everything = torch.cat([ds[i][1] for i in range(len(ds))])
    np.testing.assert_allclose(everything.mean(0).numpy(), 0, atol=1e-5)
    np.testing.assert_allclose(everything.std(0, unbiased=False).numpy(), 1, atol=1e-4)
    text = (root / "data" / "train" / "text").read_text().splitlines()
    assert f"{utt} {tok.decode(tokens.tolist())}" in text


def test_short_utterances_and_missing_transcripts_are_dropped(toy, tmp_path):
    root, cfg, tok = toy
    text = (root / "data" / "train" / "text").read_text().splitlines()
    ds = CtcDataset(feature_set_dir(cfg, "train"), root / "data" / "train", tok, subsample=40)
    needed = {line.split()[0]: min_frames(tok.encode(line.split(maxsplit=1)[1])) for line in text}
    assert 0 < len(ds) < 12
    assert all(-(-ds.num_frames[i] // 40) >= needed[u] for i, u in enumerate(ds.utts))
    # Transcripts for only two utterances: the rest are skipped; none at all is an error.
    data = tmp_path / "train"
    shutil.copytree(root / "data" / "train", data)
    (data / "text").write_text("\n".join(text[:2]) + "\n")
    assert CtcDataset(feature_set_dir(cfg, "train"), data, tok, subsample=1).utts == [
        line.split()[0] for line in text[:2]
    ]
    (data / "text").write_text("")
    with pytest.raises(InputError, match="no utterance has both"):
        CtcDataset(feature_set_dir(cfg, "train"), data, tok, subsample=1)


def min_frames(tokens: list[int]) -> int:
    """CTC's output frames for a target, one at a time: a token each, a blank between repeats."""
    return len(tokens) + sum(1 for a, b in zip(tokens, tokens[1:]) if a == b)


def test_ctc_min_frames_counts_repeats_within_each_target():
    assert min_frames([5, 5, 6, 6, 6]) == 8 and min_frames([]) == 0
    rng = np.random.default_rng(0)
    targets = [list(rng.integers(1, 4, size=n)) for n in rng.integers(0, 9, size=300)]  # empty ones too
    tokens = np.array([t for target in targets for t in target], np.int32)
    offsets = np.cumsum([0] + [len(t) for t in targets])
    assert ctc_min_frames(tokens, offsets).tolist() == [min_frames(t) for t in targets]


def test_collate_pads_and_concatenates():
    items = [("a", torch.ones(3, 2), torch.tensor([4, 5])), ("b", torch.ones(5, 2), torch.tensor([6]))]
    b = collate(items)
    assert b.utts == ["a", "b"] and b.feats.shape == (2, 5, 2)
    assert b.feats[0, 3:].abs().sum() == 0
    assert b.feat_lens.tolist() == [3, 5] and b.targets.tolist() == [4, 5, 6] and b.target_lens.tolist() == [2, 1]


def test_missing_feat_dim_names_the_file(tmp_path):
    with pytest.raises(InputError, match=r"feat_dim: missing"):
        read_feat_dim(tmp_path)
    (tmp_path / "feat_dim").write_text("x\n")
    with pytest.raises(InputError, match="expected one integer"):
        read_feat_dim(tmp_path)
