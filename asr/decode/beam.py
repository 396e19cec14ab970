"""CTC prefix beam search over tokenizer units (BPE pieces or characters), constrained to a
lexicon and scored with a word n-gram LM (KenLM, through flashlight-text's binding).

Why not flashlight-text's own LexiconDecoder: it completes a word on the frame where the
word's last token is first emitted and then cannot continue that token's run, so a final
token spanning two frames (half of all emissions of our subsampled CTC models) must be
paid for with a blank. The prefix search below (Hannun et al. 2014, as in ESPnet and
pyctcdecode) keeps, for every prefix, the probability of ending in blank and in non-blank,
which handles repeats exactly.

A hypothesis is a token prefix; it maximises

    log P_CTC(prefix) + lm_weight x ln P_LM(words) + word_score x #words

where a word is complete when the next word-initial token (one starting with '▁') arrives
or the utterance ends; its tokens must spell a lexicon word, or the prefix is dropped.
With `lm_path=None` the LM term is 0 and the search only keeps the output in the lexicon.
The result is a `Hypothesis` (tokens at their emission frames, like greedy search), so word
timing and CTM output are shared.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from asr.decode.hypothesis import Hypothesis
from asr.decode.lexicon import Lexicon
from asr.text.tokenizer import WORD_BOUNDARY
from asr.utils.errors import InputError

NEG_INF = -math.inf
LN10 = math.log(10.0)
ROOT = 0


@dataclass(frozen=True)
class BeamOptions:
    beam_size: int = 16  # prefixes kept per frame
    beam_size_token: int = 10  # most likely tokens tried per frame
    beam_threshold: float = 20.0  # drop prefixes this far (log score) below the best
    lm_weight: float = 0.5  # times the LM's natural-log probability
    word_score: float = 0.0  # added per word (insertion bonus; negative = penalty)


def logaddexp(a: float, b: float) -> float:
    if a == NEG_INF:
        return b
    if b == NEG_INF:
        return a
    return max(a, b) + math.log1p(math.exp(-abs(a - b)))


class SpellingTrie:
    """Lexicon spellings as a trie over token ids; node 0 is the root."""

    def __init__(self, lexicon: Lexicon):
        self.children: list[dict[int, int]] = [{}]
        self.word: list[int] = [-1]  # lexicon index of the word ending at a node, or -1
        for index, spelling in enumerate(lexicon.spellings):
            node = ROOT
            for token in spelling:
                nxt = self.children[node].get(token)
                if nxt is None:
                    nxt = len(self.children)
                    self.children[node][token] = nxt
                    self.children.append({})
                    self.word.append(-1)
                node = nxt
            if spelling:
                self.word[node] = index


class WordLM:
    """A KenLM model over the lexicon's words (flashlight-text's KenLM binding), log10 scores."""

    def __init__(self, lm_path: str | os.PathLike, words: tuple[str, ...]):
        from flashlight.lib.text.decoder.kenlm import KenLM
        from flashlight.lib.text.dictionary import Dictionary

        if not os.path.isfile(lm_path):
            raise InputError(f"{lm_path}: language model not found; run the LM stage (`python -m asr.lm`) first")
        try:
            self.model = KenLM(str(lm_path), Dictionary(list(words)))
        except RuntimeError as err:
            raise InputError(f"{lm_path}: KenLM cannot load it ({err}); rebuild it with `python -m asr.lm`") from None

    def start(self):
        return self.model.start(False)

    def score(self, state, word: int):
        return self.model.score(state, word)

    def finish(self, state):
        return self.model.finish(state)


class _NoLM:
    """The empty LM: every word sequence scores 0."""

    def start(self):
        return None

    def score(self, state, word: int):
        return None, 0.0

    def finish(self, state):
        return None, 0.0


@dataclass
class _Prefix:
    """What a token prefix implies, independent of the frames: its place in the lexicon trie
    and the LM score of its completed words."""

    node: int
    lm_state: object
    lm_log10: float
    words: int


class BeamSearchDecoder:
    """Reusable over utterances and options; one per process (the LM is loaded once)."""

    def __init__(self, lexicon: Lexicon, pieces: list[str], blank: int, lm_path: str | os.PathLike | None):
        self.blank = blank
        self.vocab_size = len(pieces)
        self.word_start = np.array([p.startswith(WORD_BOUNDARY) for p in pieces])
        self.trie = SpellingTrie(lexicon)
        self.lm = _NoLM() if lm_path is None else WordLM(lm_path, lexicon.words)

    def _extend(self, prefix: _Prefix, token: int) -> _Prefix | None:
        """The prefix with one more token, or None when that leaves the lexicon."""
        if self.word_start[token]:
            prefix = self._complete_word(prefix)
            if prefix is None:
                return None
            child = self.trie.children[ROOT].get(token)
        else:
            child = self.trie.children[prefix.node].get(token)
        if child is None:
            return None
        return _Prefix(child, prefix.lm_state, prefix.lm_log10, prefix.words)

    def _complete_word(self, prefix: _Prefix) -> _Prefix | None:
        """Score the word in progress with the LM (nothing to do at the root)."""
        if prefix.node == ROOT:
            return prefix
        word = self.trie.word[prefix.node]
        if word < 0:
            return None
        state, log10 = self.lm.score(prefix.lm_state, word)
        return _Prefix(ROOT, state, prefix.lm_log10 + log10, prefix.words + 1)

    def _final(self, prefix: _Prefix) -> _Prefix | None:
        prefix = self._complete_word(prefix)
        if prefix is None:
            return None
        _, log10 = self.lm.finish(prefix.lm_state)
        return _Prefix(ROOT, None, prefix.lm_log10 + log10, prefix.words)

    @staticmethod
    def _lm_term(prefix: _Prefix, options: BeamOptions) -> float:
        return options.lm_weight * LN10 * prefix.lm_log10 + options.word_score * prefix.words

    def decode(self, log_probs: np.ndarray, options: BeamOptions) -> Hypothesis:
        """log_probs (T, V) of one utterance -> the best hypothesis."""
        log_probs = np.asarray(log_probs, dtype=np.float64)
        frames, vocab = log_probs.shape
        if vocab != self.vocab_size:
            raise ValueError(f"log-probabilities have {vocab} outputs, the tokenizer {self.vocab_size}")
        k = min(options.beam_size_token, vocab)
        top_tokens = (
            np.argpartition(-log_probs, k - 1, axis=1)[:, :k] if k < vocab else np.tile(np.arange(vocab), (frames, 1))
        )
        info: dict[tuple, _Prefix] = {(): _Prefix(ROOT, self.lm.start(), 0.0, 0)}
        beam: dict[tuple, list] = {(): [0.0, NEG_INF, ()]}  # prefix -> [log p_blank, log p_nonblank, frames]
        for t in range(frames):
            beam = self._step(beam, info, log_probs[t], top_tokens[t], t)
            beam = self._prune(beam, info, options)
        return self._best(beam, info, log_probs, options)

    def _step(self, beam: dict, info: dict, logp: np.ndarray, tokens: np.ndarray, t: int) -> dict:
        new: dict[tuple, list] = {}

        def add(key: tuple, p_blank: float, p_nonblank: float, frames: tuple) -> None:
            entry = new.get(key)
            if entry is None:
                new[key] = [p_blank, p_nonblank, frames]
                return
            before = logaddexp(entry[0], entry[1])
            entry[0], entry[1] = logaddexp(entry[0], p_blank), logaddexp(entry[1], p_nonblank)
            if logaddexp(p_blank, p_nonblank) > before:  # keep the timing of the likelier path
                entry[2] = frames

        for key, (p_b, p_nb, frames) in beam.items():
            total = logaddexp(p_b, p_nb)
            add(key, total + logp[self.blank], NEG_INF, frames)
            last = key[-1] if key else None
            if last is not None:
                add(key, NEG_INF, p_nb + logp[last], frames)  # the last token's run goes on
            for token in tokens:
                token = int(token)
                if token == self.blank:
                    continue
                source = p_b if token == last else total  # a repeated token needs a blank between
                if source == NEG_INF:
                    continue
                extended = key + (token,)
                if extended not in info:
                    nxt = self._extend(info[key], token)
                    if nxt is None:
                        continue
                    info[extended] = nxt
                add(extended, NEG_INF, source + logp[token], frames + (t,))
        return new

    def _prune(self, beam: dict, info: dict, options: BeamOptions) -> dict:
        scored = sorted(
            ((logaddexp(v[0], v[1]) + self._lm_term(info[key], options), key) for key, v in beam.items()),
            reverse=True,
        )
        best = scored[0][0]
        return {key: beam[key] for score, key in scored[: options.beam_size] if score >= best - options.beam_threshold}

    def _best(self, beam: dict, info: dict, log_probs: np.ndarray, options: BeamOptions) -> Hypothesis:
        best_key, best_score = None, NEG_INF
        for key, (p_b, p_nb, _) in beam.items():
            final = self._final(info[key])
            if final is None:
                continue  # ends inside a word the lexicon does not have
            score = logaddexp(p_b, p_nb) + self._lm_term(final, options)
            if score > best_score:
                best_key, best_score = key, score
        if best_key is None:
            return Hypothesis()
        frames = beam[best_key][2]
        return Hypothesis(
            tokens=list(best_key),
            frames=list(frames),
            probs=[float(math.exp(log_probs[f, tok])) for tok, f in zip(best_key, frames)],
        )
