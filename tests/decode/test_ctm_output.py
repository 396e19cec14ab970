"""Words, times and files from a CTC best path: hyp.txt and NIST CTM."""

import math

import pytest
import torch

from asr.data.ctm import CtmWord, write_ctm
from asr.data.datadir import DataDir
from asr.decode.greedy import ctc_greedy
from asr.decode.output import TimedWord, ctm_words, timed_words, write_hyp_text
from asr.kaldi.segments import Segment
from asr.text.tokenizer import Tokenizer, train_sentencepiece

TEXT = ["yes no okay [noise] ab-", "no no yes [laughter] well", "ab- okay well yes"] * 5


@pytest.fixture(scope="module")
def chars():
    """A character tokenizer, so words are several tokens each."""
    proto = train_sentencepiece(TEXT, "char", 40, user_symbols=["[noise]", "[laughter]", "[vocalized-noise]"])
    return Tokenizer.from_bytes(proto)


def path_log_probs(tok, placed: dict[int, str], frames: int) -> torch.Tensor:
    """Log-probs (1, T, V): piece `placed[t]` at frame t with p = 0.8, blank (p = 0.9) elsewhere."""
    V = tok.vocab_size
    probs = torch.full((frames, V), 0.1 / (V - 1))
    for t in range(frames):
        token = tok.sp.piece_to_id(placed[t]) if t in placed else 0
        probs[t] = (0.2 if t in placed else 0.1) / (V - 1)
        probs[t, token] = 0.8 if t in placed else 0.9
    return probs.log()[None]


def test_words_and_ctm_times_from_hand_made_log_probs(chars):
    placed = {1: "▁", 2: "n", 3: "n", 5: "o", 8: "▁[noise]", 10: "▁", 11: "a", 13: "b", 14: "-"}
    (hyp,) = ctc_greedy(path_log_probs(chars, placed, 17), torch.tensor([17]))
    words = timed_words(hyp, chars)
    assert [(w.word, w.start_frame, w.end_frame) for w in words] == [("no", 1, 6), ("[noise]", 8, 9), ("ab-", 10, 15)]
    assert all(math.isclose(w.confidence, 0.8, rel_tol=1e-5) for w in words)

    data = DataDir(
        utt2spk={"sw02001-A_001250-001300": "sw02001-A"},
        segments={"sw02001-A_001250-001300": Segment("sw02001-A", 12.5, 13.0)},
        reco2file_and_channel={"sw02001-A": ("sw02001", "1")},
    )
    # 10 ms frames, subsampled by 3: 30 ms per output frame, offset by the segment start.
    lines = ctm_words(data, "sw02001-A_001250-001300", words, frame_seconds=0.03)
    assert [str(c) for c in lines] == [
        "sw02001 1 12.53 0.15 no 0.80",
        "sw02001 1 12.74 0.03 [noise] 0.80",
        "sw02001 1 12.80 0.15 ab- 0.80",
    ]


def test_file_and_channel_fallbacks():
    w = [TimedWord("hi", 2, 4, 0.5)]
    with_segments = DataDir(utt2spk={"u1": "s"}, segments={"u1": Segment("rec7", 3.0, 9.0)})
    assert str(ctm_words(with_segments, "u1", w, 0.01)[0]) == "rec7 A 3.02 0.02 hi 0.50"
    no_segments = DataDir(utt2spk={"u1": "s"})  # the utterance is the recording, starting at 0
    assert str(ctm_words(no_segments, "u1", w, 0.01)[0]) == "u1 A 0.02 0.02 hi 0.50"


def test_files_are_sorted(tmp_path):
    write_hyp_text(tmp_path / "hyp.txt", {"sw_b": "x y", "en_a": "", "sw_B": "z"})
    assert (tmp_path / "hyp.txt").read_text() == "en_a\nsw_B z\nsw_b x y\n"
    lines = [
        CtmWord("sw_2", "A", 5.0, 0.1, "c", 1.0),
        CtmWord("en_1", "B", 1.0, 0.1, "b", 1.0),
        CtmWord("sw_2", "A", 1.0, 0.1, "a", 1.0),
        CtmWord("en_1", "A", 9.0, 0.1, "d", 1.0),
        CtmWord("sw_2", "A", 5.0, 0.1, "c2", 1.0),  # same start: word order kept
    ]
    write_ctm(tmp_path / "hyp.ctm", lines)
    assert [line.split()[4] for line in (tmp_path / "hyp.ctm").read_text().splitlines()] == ["d", "b", "a", "c", "c2"]
