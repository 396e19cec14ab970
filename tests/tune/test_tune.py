"""The LM weight / word score sweep's choice of its best point."""

from asr.tune.grid import best_point, edges_reached


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
