"""Issue 31, item 3: a file damaged between stages is refused with one line naming it and the
stage to re-run (exit 2), never a traceback from inside a library and never a silent run:
a truncated cmvn.ark, a truncated feats.ark, a truncated sentencepiece model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from asr.config import load_config
from asr.train import loop
from asr.utils.errors import InputError
from tests.fixtures.toy_corpus import toy_overrides


@pytest.fixture
def root(toy_corpus, tmp_path) -> Path:
    """A copy of the toy corpus whose tables point at its own arks (so they can be damaged)."""
    root = tmp_path / "toy"
    shutil.copytree(toy_corpus, root, ignore=shutil.ignore_patterns("index.*"))
    for scp in (root / "feats").rglob("*.scp"):
        scp.write_text(scp.read_text().replace(str(toy_corpus), str(root)))
    return root


def truncate(path: Path, keep: float = 0.5) -> None:
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])


def test_a_truncated_cmvn_ark_stops_training_with_one_line(root):
    ark = root / "feats" / "toy" / "train" / "cmvn.ark"
    truncate(ark)
    with pytest.raises(InputError) as err:  # the stage runner prints it as one line, exit 2
        loop.train(load_config(toy_overrides(root, ["train.epochs=1"])))
    assert str(err.value).startswith(f"{ark}: unreadable CMVN statistics (") and "\n" not in str(err.value)
    assert str(err.value).endswith(f"delete {ark.parent} and re-run the features stage")


def test_a_truncated_feats_ark_names_the_cause(root):
    truncate(root / "feats" / "toy" / "train" / "feats.ark", 0.3)
    with pytest.raises(InputError, match=r"cannot read features of '[^']+' \(\w+(: |, the file is truncated)") as err:
        loop.train(load_config(toy_overrides(root, ["train.epochs=1"])))
    assert "()" not in str(err.value)


def test_a_truncated_tokenizer_model_is_refused_not_trained_on(root):
    model = root / "lang" / "bpe40.model"
    truncate(model, 0.6)
    with pytest.raises(
        InputError,
        match=rf"^{model}: damaged, truncated or replaced tokenizer model \(\d+ bytes, the stage wrote \d+\); "
        r"re-run the tokenizer stage \(python -m asr.text\)$",
    ):
        loop.train(load_config(toy_overrides(root, ["train.epochs=1"])))
    assert not (root / "exp" / "checkpoints").exists()
