"""WER counts on hand-aligned strings, subsets, speakers, and the input errors."""

import logging
import random

import jiwer
import pytest

from asr.score.result import CORRECT, DELETION, INSERTION, SUBSTITUTION, ErrorCounts
from asr.score.subsets import reported_subsets, subset_of
from asr.score.wer import score, score_files
from asr.utils.errors import InputError

SWB1 = "sw_4390-A_000100-000200"
SWB2 = "sw_4390-B_000300-000400"
CH1 = "en_4156-A_000100-000200"


def counts(result, subset="total"):
    c = result.subsets[subset]
    return (c.correct, c.substitutions, c.deletions, c.insertions, c.words, c.sentences)


def test_one_substitution_one_deletion():
    # the cat SAT on THE mat / the cat SIT on *** mat: C=4 S=1 D=1, 2/6 = 33.33%
    result = score({"u1": "the cat sat on the mat"}, {"u1": "the cat sit on mat"})
    assert counts(result) == (4, 1, 1, 0, 6, 1)
    assert result.subsets["total"].wer == 33.33


def test_insertions():
    # a b c / a b c D E: I=2, 2/3 = 66.67%
    result = score({"u1": "a b c"}, {"u1": "a b c d e"})
    assert counts(result) == (3, 0, 0, 2, 3, 1)
    assert result.subsets["total"].wer == 66.67


def test_alignment_columns():
    result = score({"u1": "a b c d"}, {"u1": "a x c d e"})
    ops = [(w.op, w.ref, w.hyp) for w in result.utterances[0].words]
    assert ops == [
        (CORRECT, "a", "a"),
        (SUBSTITUTION, "b", "x"),
        (CORRECT, "c", "c"),
        (CORRECT, "d", "d"),
        (INSERTION, None, "e"),
    ]


def test_counts_sum_over_utterances():
    refs = {"u1": "the cat sat on the mat", "u2": "a b c", "u3": "one two three four"}
    hyps = {"u1": "the cat sit on mat", "u2": "a b c d e", "u3": ""}
    result = score(refs, hyps)
    # u1: C4 S1 D1; u2: C3 I2; u3 (empty hypothesis): D4 -> 8 errors / 13 words
    assert counts(result) == (7, 1, 5, 2, 13, 3)
    assert result.subsets["total"].wer == 61.54
    assert list(result.subsets) == ["total"]
    assert result.missing_hypotheses == []  # an empty line is a hypothesis with no words


def test_per_utterance_counts_add_up_to_jiwer_totals():
    # Guards the expansion of jiwer's alignment chunks into per-word columns.
    rng = random.Random(0)
    vocab = "a b c d e f".split()
    refs = {f"u{i:03d}": " ".join(rng.choices(vocab, k=rng.randint(0, 12))) for i in range(200)}
    hyps = {utt: " ".join(rng.choices(vocab, k=rng.randint(0, 12))) for utt in refs}
    total = score(refs, hyps).subsets["total"]
    utts = sorted(refs)
    expected = jiwer.process_words([refs[u] for u in utts], [hyps[u] for u in utts])
    assert (total.correct, total.substitutions, total.deletions, total.insertions) == (
        expected.hits,
        expected.substitutions,
        expected.deletions,
        expected.insertions,
    )
    assert total.wer == round(100 * expected.wer, 2)


def test_normalisation_applies_to_both_sides():
    refs = {"u1": "uh I [noise] think th- so"}
    hyps = {"u1": "I um think <unk> so [laughter]"}
    assert counts(score(refs, hyps)) == (3, 0, 0, 0, 3, 1)


def test_hub5_subsets_split_by_id_prefix():
    refs = {SWB1: "a b c d", SWB2: "e f", CH1: "g h i j k"}
    hyps = {SWB1: "a b x d", SWB2: "e f y", CH1: "g h"}
    result = score(refs, hyps)
    assert list(result.subsets) == ["swb", "callhome", "total"]
    assert counts(result, "swb") == (5, 1, 0, 1, 6, 2)  # 2/6
    assert counts(result, "callhome") == (2, 0, 3, 0, 5, 1)  # 3/5
    assert counts(result, "total") == (7, 1, 3, 1, 11, 3)  # 5/11
    assert [result.subsets[s].wer for s in ("swb", "callhome", "total")] == [33.33, 60.0, 45.45]


def test_subset_naming():
    assert subset_of(SWB1) == "swb"
    assert subset_of(CH1) == "callhome"
    assert subset_of("sw02001-A_000098-001156") is None  # Switchboard training/dev id
    assert reported_subsets(["sw02001-A_000098-001156", "sw02001-B_000100-000200"]) == ["total"]
    assert reported_subsets([CH1]) == ["callhome", "total"]


def test_speakers_from_utt2spk_or_id():
    refs = {SWB1: "a b", SWB2: "c d", CH1: "e"}
    hyps = {SWB1: "a", SWB2: "c d", CH1: "e"}
    by_id = score(refs, hyps).speakers
    assert list(by_id) == ["en_4156-A", "sw_4390-A", "sw_4390-B"]
    assert by_id["sw_4390-A"] == ErrorCounts(correct=1, deletions=1, sentences=1)
    utt2spk = {SWB1: "spk1", SWB2: "spk1", CH1: "spk2"}
    by_map = score(refs, hyps, utt2spk).speakers
    assert by_map == {"spk1": ErrorCounts(correct=3, deletions=1, sentences=2), "spk2": ErrorCounts(1, sentences=1)}


def test_missing_hypotheses_are_deletions_and_logged(caplog):
    refs = {SWB1: "a b c", SWB2: "d e", CH1: "f"}
    hyps = {SWB1: "a b c"}
    with caplog.at_level(logging.WARNING, logger="asr.score"):
        result = score(refs, hyps, hyp_source="exp/x/hyp.txt")
    assert counts(result) == (3, 0, 3, 0, 6, 3)
    assert result.missing_hypotheses == [CH1, SWB2]
    assert [w.op for w in result.utterances[2].words] == [DELETION, DELETION]
    assert "exp/x/hyp.txt: 2 of 3 reference utterances have no hypothesis" in caplog.text
    assert CH1 in caplog.text and SWB2 in caplog.text


def test_reference_without_scored_words_is_an_error():
    with pytest.raises(InputError, match=r"ref/text: subset 'total' has no reference words"):
        score({"u1": "[noise] uh"}, {"u1": "a"}, ref_source="ref/text")


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_score_files_reads_kaldi_text(tmp_path):
    ref = write(tmp_path / "data/text", f"{CH1} g h i\n{SWB1} a b c d\n")
    hyp = write(tmp_path / "hyp.txt", f"{SWB1} a b x d\n{CH1}\n")  # CH1: no words
    result = score_files(ref, hyp)
    assert counts(result, "swb") == (3, 1, 0, 0, 4, 1)
    assert counts(result, "callhome") == (0, 0, 3, 0, 3, 1)


def test_empty_hypothesis_file_is_an_error(tmp_path):
    ref = write(tmp_path / "text", f"{SWB1} a b\n")
    hyp = write(tmp_path / "decode/hyp.txt", "")
    with pytest.raises(InputError, match=rf"{hyp}: hypothesis file has no utterances"):
        score_files(ref, hyp)


def test_missing_hypothesis_file_is_an_error(tmp_path):
    ref = write(tmp_path / "text", f"{SWB1} a b\n")
    with pytest.raises(InputError, match=r"hyp.txt: hypothesis file not found; run the decode stage"):
        score_files(ref, tmp_path / "hyp.txt")


def test_unknown_hypothesis_utterances_are_an_error(tmp_path):
    ref = write(tmp_path / "text", f"{SWB1} a b\n")
    hyp = write(tmp_path / "hyp.txt", f"{SWB1} a b\nsw_9999-A_000000-000100 x\nen_9999-B_000000-000100 y\n")
    with pytest.raises(InputError) as err:
        score_files(ref, hyp)
    message = str(err.value)
    assert message.startswith(f"{hyp}: 2 hypothesis utterance(s) are not in the reference {ref}")
    assert "en_9999-B_000000-000100, sw_9999-A_000000-000100" in message


def test_duplicate_hypothesis_is_an_error(tmp_path):
    ref = write(tmp_path / "text", f"{SWB1} a b\n")
    hyp = write(tmp_path / "hyp.txt", f"{SWB1} a b\n{SWB1} a\n")
    with pytest.raises(InputError, match=rf"{hyp}:2: duplicate key"):
        score_files(ref, hyp)


def test_no_hypotheses_at_all_is_an_error_not_100_percent():
    with pytest.raises(InputError, match=r"exp/x/hyp.txt: no hypotheses"):
        score({SWB1: "a b"}, {}, hyp_source="exp/x/hyp.txt")
