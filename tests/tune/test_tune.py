"""The LM weight / word score sweep's choice of its best point, and its stage record."""

import json
import logging

import pytest
import torch

from asr.decode.stage import decode
from asr.tune.grid import best_point, edges_reached, tune
from tests.fixtures.toy_corpus import WORDS, make_toy_experiment, save_untrained_checkpoint, toy_config

torch.set_num_threads(1)


def test_best_point_prefers_the_lowest_wer_then_the_smaller_values():
    grid = [
        {"lm_weight": 1.0, "word_score": 0.0, "wer": 5.0},
        {"lm_weight": 0.5, "word_score": 1.0, "wer": 5.0},
        {"lm_weight": 0.5, "word_score": 2.0, "wer": 5.0},
        {"lm_weight": 2.0, "word_score": 0.0, "wer": 6.0},
    ]
    assert best_point(grid) == grid[1]


def test_edges_reached_names_each_value_whose_best_is_the_grids_smallest_or_largest():
    grid = [
        {"lm_weight": w, "word_score": s, "wer": 5.0 - w + abs(s)} for w in (0.3, 0.5, 0.8) for s in (-1.0, 0.0, 1.0)
    ]
    best = best_point(grid)
    assert (best["lm_weight"], best["word_score"]) == (0.8, 0.0)
    assert edges_reached(grid, best) == ["lm_weight"]


def test_edges_reached_is_empty_inside_the_grid_and_for_a_single_value():
    grid = [{"acoustic_scale": a, "wer": abs(a - 0.1)} for a in (0.067, 0.1, 0.125)]
    assert edges_reached(grid, best_point(grid)) == []
    single = [{"acoustic_scale": 0.1, "wer": 1.0}]
    assert edges_reached(single, best_point(single)) == []


# The tune stage's record (asr/decode/record.py): the LM beam search's grid over the toy dev set,
# with the lexicon alone (no KenLM needed), and the untrained model of the decode stage's tests.
BEAM = [
    "decode=beam_lm",
    "decode.lm=none",
    "decode.jobs=1",
    "decode.threads=1",
    "decode.tune_lm_weights=[0.5]",
    "decode.tune_word_scores=[0.0,1.0]",
]


@pytest.fixture
def toy(tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("".join(f"{w} 1\n" for w in WORDS))
    beam = [*BEAM, f"decode.lexicon_words={words}"]
    cfg = make_toy_experiment(tmp_path, num_train=12, num_dev=4, extra=beam)
    save_untrained_checkpoint(cfg)
    return tmp_path, beam


def tuned(cfg, caplog) -> bool:
    """Whether this tune run tuned (rather than skipping by its record)."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="asr.tune.grid"):
        result = tune(cfg)
    assert len(result["grid"]) == len(cfg.decode.tune_lm_weights) * len(cfg.decode.tune_word_scores)
    return "tuning (" in caplog.text


def test_tune_skips_when_its_record_matches_and_reruns_what_changed(toy, caplog):
    root, beam = toy
    record = root / "exp/lm_tuning.record.json"
    assert tuned(toy_config(root, beam), caplog) and record.is_file()
    assert list(json.loads(record.read_text())["outputs"]) == ["lm_tuning.json"]
    assert not tuned(toy_config(root, beam), caplog) and f"tuned already ({record}), skipping" in caplog.text
    # the values the tuning chooses, and how fast it runs, are none of its options
    assert not tuned(toy_config(root, [*beam, "decode.lm_weight=2.0", "decode.jobs=2"]), caplog)

    wider = [*beam, "decode.tune_lm_weights=[0.5,1.0]"]
    assert tuned(toy_config(root, wider), caplog) and "tune_lm_weights: [0.5] -> [0.5, 1.0]" in caplog.text
    text = root / "data/dev/text"
    text.write_text(text.read_text().replace(" ", " yes ", 1))  # a corrected reference
    assert tuned(toy_config(root, wider), caplog) and f"{text} changed since the tune stage read it" in caplog.text
    record.unlink()
    assert tuned(toy_config(root, wider), caplog) and "no record of a finished tune stage" in caplog.text

    # the decode that uses the tuning names it: a tuning that chose anew decodes again
    decode_record = decoded_record(root, beam)
    assert str(root / "exp/lm_tuning.json") in decode_record["inputs"]


def decoded_record(root, beam) -> dict:
    decode(toy_config(root, beam))
    return json.loads((root / "exp/decode_eval/decode.record.json").read_text())
