"""The LM weight / word score sweep's choice of its best point."""

from asr.tune.grid import best_point


def test_best_point_prefers_the_lowest_wer_then_the_smaller_values():
    grid = [
        {"lm_weight": 1.0, "word_score": 0.0, "wer": 5.0},
        {"lm_weight": 0.5, "word_score": 1.0, "wer": 5.0},
        {"lm_weight": 0.5, "word_score": 2.0, "wer": 5.0},
        {"lm_weight": 2.0, "word_score": 0.0, "wer": 6.0},
    ]
    assert best_point(grid) == grid[1]
