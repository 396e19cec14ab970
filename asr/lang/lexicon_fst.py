"""The lexicon FST L (phones in, words out) with optional silence between words, as Kaldi's
utils/lang/make_lexicon_fst.py builds it, and the disambiguation symbols that make it
determinizable (utils/add_lex_disambig.pl).

Three states carry the silence: from the start, either no silence (cost -log(1 - p)) or
`sil` (cost -log p) leads to the loop state; after each word the same choice leads back to
it. Each pronunciation is a chain from the loop state with the word on its first arc.
"""

from __future__ import annotations

import math
from collections import Counter

import kaldi_hmm_gmm  # noqa: F401  (before kaldifst: with kaldifst 1.8 the other order deadlocks)
import kaldifst

Pron = tuple[str, ...]


def add_lex_disambig(entries: list[tuple[str, Pron]]) -> tuple[list[tuple[str, Pron]], int]:
    """Entries with `#1`, `#2`, ... appended to a pronunciation that another word shares or that
    is a prefix of another one (`#0` is G's backoff symbol); returns them and the highest used."""
    count = Counter(pron for _, pron in entries)
    prefixes = {pron[:n] for _, pron in entries for n in range(1, len(pron))}
    last_used: dict[Pron, int] = {}
    out = []
    for word, pron in entries:
        if count[pron] == 1 and pron not in prefixes:
            out.append((word, pron))
            continue
        last_used[pron] = last_used.get(pron, 0) + 1
        out.append((word, pron + (f"#{last_used[pron]}",)))
    return out, max(last_used.values(), default=0)


def _arc(ilabel: int, olabel: int, cost: float, nextstate: int) -> kaldifst.StdArc:
    return kaldifst.StdArc(ilabel=ilabel, olabel=olabel, weight=cost, nextstate=nextstate)


def lexicon_fst(
    entries: list[tuple[str, Pron]],
    phones: dict[str, int],
    words: dict[str, int],
    silence: str,
    sil_prob: float,
    sil_disambig: str | None = None,
    word_disambig: str | None = None,
) -> kaldifst.StdVectorFst:
    """L (or L_disambig with `sil_disambig` after the silence phone and a `word_disambig`
    self-loop, #0:#0, on the loop state for G's backoff arcs). Output-label sorted."""
    sil_cost, no_sil_cost = -math.log(sil_prob), -math.log(1.0 - sil_prob)
    fst = kaldifst.StdVectorFst()
    start, loop, sil_state = fst.add_state(), fst.add_state(), fst.add_state()
    fst.start = start
    fst.set_final(state=loop, weight=0)
    fst.add_arc(state=start, arc=_arc(0, 0, no_sil_cost, loop))
    fst.add_arc(state=start, arc=_arc(0, 0, sil_cost, sil_state))
    if sil_disambig is None:
        fst.add_arc(state=sil_state, arc=_arc(phones[silence], 0, 0.0, loop))
    else:
        after_sil = fst.add_state()
        fst.add_arc(state=sil_state, arc=_arc(phones[silence], 0, 0.0, after_sil))
        fst.add_arc(state=after_sil, arc=_arc(phones[sil_disambig], 0, 0.0, loop))
    for word, pron in entries:
        state = loop
        for i, phone in enumerate(pron[:-1]):
            nxt = fst.add_state()
            fst.add_arc(state=state, arc=_arc(phones[phone], words[word] if i == 0 else 0, 0.0, nxt))
            state = nxt
        last_olabel = words[word] if len(pron) == 1 else 0
        fst.add_arc(state=state, arc=_arc(phones[pron[-1]], last_olabel, no_sil_cost, loop))
        fst.add_arc(state=state, arc=_arc(phones[pron[-1]], last_olabel, sil_cost, sil_state))
    if word_disambig is not None:
        fst.add_arc(state=loop, arc=_arc(phones[word_disambig], words[word_disambig], 0.0, loop))
    kaldifst.arcsort(fst, sort_type="olabel")
    return fst
