"""Kaldi's Switchboard subsets: train_dev (first N) and train_nodup (remove_dup_utts.sh)."""

from __future__ import annotations

import pytest

from asr.data.datadir import DataDir, streamed
from asr.data.prepare.spool import Spool
from asr.data.subsets import check_first, duplicate_cap, kaldi_random, remove_duplicates
from asr.kaldi.segments import Segment
from asr.utils.errors import InputError


def test_generator_is_remove_dup_utts_sequence():
    # k <- (k + 103349) mod 71147: 32202, 64404, 25459, ...
    draws = kaldi_random()
    assert [round(next(draws) * 71147) for _ in range(4)] == [32202, 64404, 25459, 57661]


def test_rare_transcripts_kept_and_frequent_ones_thinned_deterministically():
    texts = ["uh-huh"] * 6 + ["yeah"] * 2 + ["i think so"]
    keeps = duplicate_cap(texts, 3)
    keep = [keeps(t) for t in texts]
    # 'yeah' (2 < 3) and the unique line stay; each 'uh-huh' stays when the next draw < 3/6
    draws = [32202 / 71147, 64404 / 71147, 25459 / 71147, 57661 / 71147, 18716 / 71147, 50918 / 71147]
    assert keep == [d < 0.5 for d in draws] + [True, True, True]
    assert keep[:6] == [True, False, True, False, True, False]


def test_remove_duplicates_on_a_data_dir_and_bad_cap():
    d = DataDir()
    for i, text in enumerate(["uh-huh", "uh-huh", "uh-huh", "uh-huh", "right"]):
        utt = f"sw02001-A_{i:06d}-{i + 1:06d}"
        d.text[utt], d.utt2spk[utt] = text, "sw02001-A"
        d.segments[utt] = Segment("sw02001-A", i / 100, (i + 1) / 100)
    d.wav_scp["sw02001-A"] = "a.sph"
    kept = remove_duplicates(streamed(d), 2).collect()
    assert sorted(kept.text.values()) == ["right", "uh-huh", "uh-huh"]
    assert set(kept.segments) == set(kept.utt2spk) == set(kept.text)
    with pytest.raises(InputError, match="data.max_duplicates=1: must be > 1"):
        remove_duplicates(streamed(d), 1)


def test_first_utterances_are_the_first_in_sorted_order():
    d = DataDir(
        utt2spk={"b_2": "b", "a_1": "a", "a_2": "a"},
        text={"b_2": "x", "a_1": "y", "a_2": "z"},
        segments={u: Segment(u[0], 0.0, 1.0) for u in ("b_2", "a_1", "a_2")},
    )
    with Spool(streamed(d)) as spool:
        assert [u.utt for u in spool.part(0, 2)] == ["a_1", "a_2"] and [u.utt for u in spool.part(2)] == ["b_2"]
        assert spool.part(0, 2).collect().wav_scp == {} and spool.part(2).collect().text == {"b_2": "x"}
    with pytest.raises(InputError, match="data.dev_utts=3 but the data has 3 utterances"):
        check_first(3, 3)
