"""The LM beam search: equal to greedy search on clear cases (with no LM, and with an LM of
weight 0), exact against brute force over every word sequence on small random problems,
lexicon building, parallel workers, and the tuned LM weight."""

from __future__ import annotations

import itertools
import json
import logging
import math

import numpy as np
import pytest
import torch

from asr.config import load_config
from asr.decode.beam import BeamOptions, BeamSearchDecoder
from asr.decode.greedy import ctc_greedy
from asr.decode.lexicon import Lexicon, build_lexicon
from asr.decode.search import BeamSpec, ParallelBeamSearch, lm_path, tuned_values
from asr.text.tokenizer import Tokenizer, train_sentencepiece
from asr.utils.errors import InputError

PIECES = ["<blk>", "<unk>", "\u2581the", "\u2581ca", "t", "s", "\u2581t", "o"]
BLANK, THE, CA, T, S, T_, OH = 0, 2, 3, 4, 5, 6, 7
LEXICON = Lexicon(
    words=("<unk>", "the", "cat", "cats", "to", "too"),
    spellings=((), (THE,), (CA, T), (CA, T, S), (T_, OH), (T_, OH, OH)),
)
# A hand-written bigram LM over the lexicon's words (log10).
ARPA = """\\data\\
ngram 1=8
ngram 2=2

\\1-grams:
-2.0\t<unk>\t0
-99\t<s>\t-0.3
-0.7\t</s>\t0
-0.6\tthe\t-0.2
-0.9\tcat\t-0.2
-1.2\tcats\t-0.2
-0.8\tto\t-0.2
-1.5\ttoo\t-0.2

\\2-grams:
-0.1\t<s> the
-0.2\tthe cat

\\end\\
"""
WIDE = BeamOptions(beam_size=10_000, beam_size_token=len(PIECES), beam_threshold=math.inf)


def peaked(path: list[int], p: float = 0.9) -> np.ndarray:
    """Log-probabilities with `p` on the path's token at each frame."""
    out = np.full((len(path), len(PIECES)), (1 - p) / (len(PIECES) - 1))
    out[np.arange(len(path)), path] = p
    return np.log(out).astype(np.float32)


def greedy(log_probs: np.ndarray):
    return ctc_greedy(torch.from_numpy(log_probs)[None], torch.tensor([len(log_probs)]))[0]


@pytest.fixture(scope="module")
def arpa(tmp_path_factory):
    path = tmp_path_factory.mktemp("lm") / "lm.arpa"
    path.write_text(ARPA)
    return path


CLEAR_PATHS = [
    # the cat too: multi-frame runs, a word-final token over two frames, 'o _ o' for a double letter
    [BLANK, THE, THE, BLANK, CA, CA, T, T, BLANK, T_, OH, BLANK, OH, OH, BLANK],
    [CA, T, S, S, T_, T_, OH, OH],  # no blanks at all between words
    [BLANK, BLANK, T_, OH, BLANK, BLANK],
]


@pytest.mark.parametrize("path", CLEAR_PATHS)
def test_no_lm_equals_greedy_on_clear_cases(path):
    log_probs = peaked(path)
    decoder = BeamSearchDecoder(LEXICON, PIECES, BLANK, None)
    hyp, ref = decoder.decode(log_probs, BeamOptions(lm_weight=0.0)), greedy(log_probs)
    assert (hyp.tokens, hyp.frames) == (ref.tokens, ref.frames)
    assert hyp.probs == pytest.approx(ref.probs, rel=1e-5)


@pytest.mark.parametrize("path", CLEAR_PATHS)
def test_lm_of_weight_zero_equals_greedy(path, arpa):
    log_probs = peaked(path)
    decoder = BeamSearchDecoder(LEXICON, PIECES, BLANK, arpa)
    assert decoder.decode(log_probs, BeamOptions(lm_weight=0.0)).tokens == greedy(log_probs).tokens


def brute_force(log_probs: np.ndarray, score_words) -> tuple[int, ...]:
    """The best token sequence over every sequence of up to 3 lexicon words (exact CTC sums)."""
    frames = log_probs.shape[0]
    best, best_tokens = -math.inf, ()
    lp = torch.from_numpy(log_probs.astype(np.float64))[:, None, :]
    for n in range(4):
        for words in itertools.product(range(1, len(LEXICON.words)), repeat=n):
            tokens = [t for w in words for t in LEXICON.spellings[w]]
            if not tokens:
                ll = float(lp[:, 0, BLANK].sum())
            else:
                ll = -float(
                    torch.nn.functional.ctc_loss(
                        lp,
                        torch.tensor([tokens]),
                        torch.tensor([frames]),
                        torch.tensor([len(tokens)]),
                        reduction="sum",
                        zero_infinity=False,
                    )
                )
            score = ll + score_words(words)
            if score > best:
                best, best_tokens = score, tuple(tokens)
    return best_tokens


@pytest.mark.parametrize("seed", range(6))
def test_exact_against_brute_force(seed, arpa):
    from flashlight.lib.text.decoder.kenlm import KenLM
    from flashlight.lib.text.dictionary import Dictionary

    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(6, len(PIECES))) * 2.5
    log_probs = (logits - np.log(np.exp(logits).sum(1, keepdims=True))).astype(np.float32)
    lm = KenLM(str(arpa), Dictionary(list(LEXICON.words)))

    def lm_log10(words) -> float:
        state, total = lm.start(False), 0.0
        for w in words:
            state, s = lm.score(state, w)
            total += s
        return total + lm.finish(state)[1]

    for weight, bonus in ((0.0, 0.0), (0.0, 1.5), (1.0, 0.5)):
        options = BeamOptions(**{**WIDE.__dict__, "lm_weight": weight, "word_score": bonus})
        expected = brute_force(log_probs, lambda ws: weight * math.log(10) * lm_log10(ws) + bonus * len(ws))
        decoder = BeamSearchDecoder(LEXICON, PIECES, BLANK, arpa)
        assert tuple(decoder.decode(log_probs, options).tokens) == expected, (weight, bonus)


def test_lm_changes_the_decision(arpa):
    # Acoustically 'cats' a little ahead of 'cat' + silence; the LM prefers 'the cat'.
    path = [THE, BLANK, CA, T, S]
    log_probs = peaked(path, p=0.6)
    log_probs[4] = math.log(0.15 / 6)
    log_probs[4, S], log_probs[4, BLANK] = math.log(0.55), math.log(0.3)
    decoder = BeamSearchDecoder(LEXICON, PIECES, BLANK, arpa)
    assert decoder.decode(log_probs, BeamOptions(lm_weight=0.0)).tokens == [THE, CA, T, S]
    assert decoder.decode(log_probs, BeamOptions(lm_weight=1.0)).tokens == [THE, CA, T]


def test_words_outside_the_lexicon_are_never_output():
    log_probs = peaked([CA, S, BLANK])  # greedy: '▁ca s', which spells no word
    assert greedy(log_probs).tokens == [CA, S]
    hyp = BeamSearchDecoder(LEXICON, PIECES, BLANK, None).decode(log_probs, BeamOptions())
    assert hyp.tokens == [CA, T]  # the likeliest lexicon word: 'cat'


def test_lexicon_from_a_real_tokenizer():
    texts = ["the cat sat on the mat", "a cat and a dog", "the dog ran"] * 20
    tok = Tokenizer.from_bytes(train_sentencepiece(texts, "bpe", 40, user_symbols=["[noise]"]))
    lexicon = build_lexicon(["the", "cat", "[noise]", "zebra", "cat", "<unk>"], tok)
    assert lexicon.words == ("<unk>", "the", "cat", "[noise]")
    assert lexicon.skipped == ("zebra",)  # 'z' and 'e b r' are not all in a 40-piece model
    for word, spelling in zip(lexicon.words[1:], lexicon.spellings[1:]):
        assert tok.decode(spelling) == word and tok.piece(spelling[0]).startswith("\u2581")
    assert len(lexicon.spellings[3]) == 1  # a tag is one token


def test_parallel_workers_give_the_same_hypotheses(arpa):
    rng = np.random.default_rng(0)
    arrays = [np.log(rng.dirichlet(np.ones(len(PIECES)) * 0.3, size=n)).astype(np.float32) for n in (5, 9, 3, 12)]
    spec = BeamSpec(LEXICON, tuple(PIECES), str(arpa))
    with ParallelBeamSearch(spec, 1) as one, ParallelBeamSearch(spec, 2) as two:
        options = BeamOptions(lm_weight=0.7)
        assert [h.tokens for h in one(arrays, options)] == [h.tokens for h in two(arrays, options)]


def test_lm_path_and_tuned_values_from_the_config(tmp_path, caplog):
    lm_dir = tmp_path / "lm"
    lm_dir.mkdir()
    cfg = load_config(["decode=beam_lm", f"lm.dir={lm_dir}", f"exp_dir={tmp_path}/exp", "lm.decode_order=3"])
    with pytest.raises(InputError, match="3gram.bin: language model not found"):
        lm_path(cfg)
    (lm_dir / "3gram.bin").write_text("x")
    assert lm_path(cfg) == str(lm_dir / "3gram.bin")
    assert lm_path(load_config(["decode=beam_lm", "decode.lm=none"])) is None
    with caplog.at_level(logging.WARNING):
        assert tuned_values(cfg) is None
    assert "lm_tuning.json not found" in caplog.text
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "lm_tuning.json").write_text(
        json.dumps({"best": {"lm_weight": 0.8, "word_score": 1.0, "wer": 2.0}})
    )
    assert tuned_values(cfg) == {"lm_weight": 0.8, "word_score": 1.0}
