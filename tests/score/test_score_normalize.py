"""The scoring normalisation: each token class is dropped, real words are kept."""

import pytest

from asr.score.normalize import (
    FILLERS,
    is_filler,
    is_noise_tag,
    is_non_lexical_marker,
    is_partial_word,
    normalize_words,
)


@pytest.mark.parametrize("tag", ["[noise]", "[laughter]", "[vocalized-noise]", "[silence]", "[NOISE]"])
def test_noise_tags_are_dropped(tag):
    assert normalize_words(f"yes {tag} no") == ["yes", "no"]


def test_noise_tag_needs_both_brackets():
    assert is_noise_tag("[noise]")
    assert not is_noise_tag("[laughter-yes")  # malformed: kept, so the error is visible


@pytest.mark.parametrize("marker", ["<unk>", "<UNK>", "<sil>"])
def test_angle_bracket_markers_are_dropped(marker):
    assert normalize_words(f"a {marker} b") == ["a", "b"]
    assert is_non_lexical_marker(marker.lower())


def test_fillers_are_the_kaldi_swbd_list():
    # Kaldi egs/swbd/s5c/local/score_sclite.sh, ESPnet egs/swbd/asr1/local/score_sclite.sh
    kaldi = {"uh", "um", "eh", "mm", "hm", "ah", "huh", "ha", "er", "oof", "hee", "ach", "eee", "ew"}
    assert kaldi <= FILLERS
    assert FILLERS - kaldi == {"%hesitation"}
    assert normalize_words(" ".join(sorted(FILLERS))) == []


def test_oh_and_uh_huh_are_words():
    # The GLM scores "oh" as a word; "uh-huh" is a backchannel, not a hesitation.
    assert not is_filler("oh")
    assert normalize_words("oh uh-huh um") == ["oh", "uh-huh"]


@pytest.mark.parametrize("partial", ["ab-", "th-", "-solute", "-"])
def test_partial_words_are_dropped(partial):
    assert is_partial_word(partial)
    assert normalize_words(f"it was {partial} good") == ["it", "was", "good"]


def test_hyphenated_words_are_kept():
    assert normalize_words("a well-known x-ray") == ["a", "well-known", "x-ray"]


def test_lower_cases_and_splits_on_any_white_space():
    assert normalize_words("  HE\tIs  A Police OFFICER\n") == ["he", "is", "a", "police", "officer"]


def test_every_class_at_once():
    text = "UH i [laughter] think <unk> th- so um -solutely [noise] yes"
    assert normalize_words(text) == ["i", "think", "so", "yes"]


def test_nothing_left():
    assert normalize_words("") == []
    assert normalize_words("[noise] uh") == []
