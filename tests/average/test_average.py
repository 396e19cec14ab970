"""python -m asr.average on a toy experiment: the averaged weights are the mean of the chosen
checkpoints (the newest, or those of lowest dev loss), and decoding runs on the average."""

import shutil

import pytest
import torch
from tests.fixtures.toy_corpus import toy_config

from asr.average.average import average, candidates
from asr.decode.stage import decode
from asr.models.checkpoint import CheckpointDir, load_checkpoint
from asr.train import loop
from asr.utils.errors import InputError

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def trained(toy_corpus, tmp_path_factory):
    """Four epochs, three epoch-end copies kept."""
    root = tmp_path_factory.mktemp("avg") / "toy"
    shutil.copytree(toy_corpus, root)
    loop.train(toy_config(root, ["train.epochs=4", "train.keep_epoch_checkpoints=3"]))
    return root


def config(root, *extra):
    return toy_config(root, ["train.epochs=4", "train.keep_epoch_checkpoints=3", *extra])


def mean_of(paths):
    states = [load_checkpoint(p)["model"] for p in paths]
    return {k: sum(s[k].double() for s in states) / len(states) for k in states[0]}


def test_training_keeps_the_newest_epoch_ends(trained):
    ckpts = CheckpointDir(trained / "exp" / "checkpoints")
    assert [p.name for p in ckpts.epoch_ends()] == ["epoch-0002.pt", "epoch-0003.pt", "epoch-0004.pt"]
    assert [load_checkpoint(p)["epoch"] for p in ckpts.epoch_ends()] == [2, 3, 4]


def test_last_n_is_the_mean_of_the_newest_epoch_ends(trained):
    out = average(config(trained, "average.num=2"))
    ckpts = trained / "exp" / "checkpoints"
    assert out == ckpts / "avg-last2.pt"
    state = load_checkpoint(out)
    assert state["averaged"]["checkpoints"] == ["epoch-0003.pt", "epoch-0004.pt"]
    expected = mean_of([ckpts / "epoch-0003.pt", ckpts / "epoch-0004.pt"])
    assert state["model"].keys() == expected.keys()
    for key, value in state["model"].items():
        assert value.dtype == torch.float32
        torch.testing.assert_close(value.double(), expected[key], rtol=0, atol=1e-6)
    newest = load_checkpoint(ckpts / "epoch-0004.pt")["model"]
    assert any(not torch.equal(value, newest[key]) for key, value in state["model"].items())  # not a copy of one input
    assert state["step"] == load_checkpoint(ckpts / "epoch-0004.pt")["step"]


def test_best_n_takes_the_epoch_ends_of_lowest_dev_loss(trained):
    found = [c for c in candidates(CheckpointDir(trained / "exp" / "checkpoints")) if c.epoch_end]
    best = sorted(sorted(found, key=lambda c: c.dev_loss)[:2], key=lambda c: c.step)
    out = average(config(trained, "average.num=2", "average.by=best"))
    state = load_checkpoint(out)
    assert out.name == "avg-best2.pt"
    assert state["averaged"]["steps"] == [c.step for c in best]
    expected = mean_of([c.path for c in best])
    for key, value in state["model"].items():
        torch.testing.assert_close(value.double(), expected[key], rtol=0, atol=1e-6)


def test_steps_n_takes_the_newest_checkpoints_periodic_ones_too(trained):
    found = candidates(CheckpointDir(trained / "exp" / "checkpoints"))
    newest = found[-3:]
    assert not all(c.epoch_end for c in newest)  # else this is last3 again
    state = load_checkpoint(average(config(trained, "average.num=3", "average.by=steps")))
    assert state["averaged"]["steps"] == [c.step for c in newest]
    expected = mean_of([c.path for c in newest])
    for key, value in state["model"].items():
        torch.testing.assert_close(value.double(), expected[key], rtol=0, atol=1e-6)


def test_decode_runs_on_the_average(trained):
    average(config(trained, "average.num=3"))
    decode(config(trained, "decode.checkpoint=avg-last3"))
    hyp = (trained / "exp" / "decode_eval" / "hyp.txt").read_text().splitlines()
    assert len(hyp) == 8 and any(len(line.split()) > 1 for line in hyp)


def test_more_than_there_are_is_an_input_error_naming_the_fix(trained):
    with pytest.raises(InputError, match="keep_epoch_checkpoints"):
        average(config(trained, "average.num=9"))
    with pytest.raises(InputError, match="make it with python -m asr.average"):
        decode(config(trained, "decode.checkpoint=avg-best7"))
