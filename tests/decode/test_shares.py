"""Decoding split into shares (asr/decode/shares.py): the shares partition a set into runs of
consecutive utterances, and merging them gives one run's files, or names the missing share."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from asr.decode.shares import Split, merge_decoded, read_tune_shares, share_utterances, shares_dir, write_tune_share
from asr.utils.errors import InputError


def test_the_shares_are_consecutive_runs_of_about_equal_frames_covering_the_set():
    utts = [f"u{i:02d}" for i in range(10)]
    frames = {u: 100 if i != 3 else 700 for i, u in enumerate(utts)}  # one long utterance
    shares = [share_utterances(utts, frames, Split(3, i)) for i in range(3)]
    assert [u for share in shares for u in share] == utts  # every utterance once, in order
    assert shares == [utts[:3], utts[3:5], utts[5:]]  # 300 / 800 / 500 frames of 1600


def cfg(tmp_path, index: int):
    return OmegaConf.create(
        {
            "exp_dir": str(tmp_path),
            "data": {"eval_set": "eval"},
            "decode": {"sets": [], "dir_suffix": "", "split": {"count": 2, "index": index}},
        }
    )


def write_share(tmp_path, index: int, hyps: str, ctm: str, skipped: str = "") -> None:
    share = shares_dir(cfg(tmp_path, index), "eval") / Split(2, index).name
    share.mkdir(parents=True)
    (share / "hyp.txt").write_text(hyps)
    (share / "hyp.ctm").write_text(ctm)
    if skipped:
        (share / "skipped").write_text(skipped)
    (share / "share.json").write_text("{}\n")


def test_merging_joins_the_shares_as_one_run_writes_them(tmp_path):
    write_share(tmp_path, 0, "a x y\nb\n", "f A 1.00 0.20 x 0.90\nf A 1.30 0.20 y 0.80\n", "c nan\n")
    write_share(tmp_path, 1, "d z\n", "f A 0.50 0.20 z 0.70\ng B 0.10 0.20 z 1.00\n")
    [out] = merge_decoded(cfg(tmp_path, -1))
    assert out == tmp_path / "decode_eval"
    assert (out / "hyp.txt").read_text() == "a x y\nb\nd z\n"
    assert (out / "hyp.ctm").read_text().splitlines() == [
        "f A 0.50 0.20 z 0.70",
        "f A 1.00 0.20 x 0.90",
        "f A 1.30 0.20 y 0.80",
        "g B 0.10 0.20 z 1.00",
    ]
    assert (out / "skipped").read_text() == "c nan\n"
    assert not (tmp_path / "decode_eval.shares").exists()


def test_a_missing_share_is_named_with_the_command_that_makes_it(tmp_path):
    write_share(tmp_path, 0, "a x\n", "f A 1.00 0.20 x 0.90\n")
    with pytest.raises(InputError, match=r"1-of-2/share.json: share 1 missing .* decode.split.index=1"):
        merge_decoded(cfg(tmp_path, -1))
    with pytest.raises(InputError, match="decode.split.index=2: choose 0 .. 1"):
        Split.of(cfg(tmp_path, 2))


def tune_cfg(tmp_path, index: int):
    cfg = OmegaConf.create({"decode": {"tuning_file": str(tmp_path / "lm_tuning.json"), "split": {"count": 2}}})
    cfg.decode.split.index = index
    return cfg


def test_tuning_shares_join_their_references_and_each_points_hypotheses(tmp_path):
    points = [{"lm_weight": 0.3}, {"lm_weight": 0.8}]
    write_tune_share(tune_cfg(tmp_path, 0), {"a": "x y"}, [(points[0], {"a": "x"}), (points[1], {"a": "x y"})])
    write_tune_share(tune_cfg(tmp_path, 1), {}, [(points[0], {}), (points[1], {})])  # an empty share
    refs, joined = read_tune_shares(tune_cfg(tmp_path, -1))
    assert refs == {"a": "x y"} and joined == [(points[0], {"a": "x"}), (points[1], {"a": "x y"})]

    write_tune_share(tune_cfg(tmp_path, 1), {}, [(points[0], {})])  # tuned over another grid
    with pytest.raises(InputError, match="different grids"):
        read_tune_shares(tune_cfg(tmp_path, -1))
