"""sclite's alignment of a reference network with a hypothesis network.

The cheapest pair of paths under sclite's default weights: a correct word costs 0, a
substitution 4, an insertion or a deletion 3. Like sclite -D, an optionally deletable
reference word is aligned like any other word (so a hypothesis word next to it is a
substitution rather than an insertion), and when it ends up deleted it is counted as
correct. Like sclite -F, a reference fragment `AB-` matches a hypothesis word beginning
with `AB`. Among equally cheap alignments, substitutions and matches are preferred to
deletions, and deletions to insertions.

The counts follow sclite: reference words = correct + substitutions + deletions along the
chosen path (so an alternation contributes the words of the alternative taken).
"""

from __future__ import annotations

import math

from asr.score.hub5.network import Network, Word
from asr.score.result import CORRECT, DELETION, INSERTION, SUBSTITUTION, AlignedWord

SUB_COST, INS_COST, DEL_COST = 4, 3, 3
OPTIONAL_DEL_COST = 2  # fits sclite -D's choices: cheaper than a deletion, dearer than nothing


def words_match(ref: Word, hyp: Word) -> bool:
    if ref.text == hyp.text:
        return True
    prefix = ref.fragment_prefix
    return prefix is not None and hyp.text.startswith(prefix)


def align_networks(ref: Network, hyp: Network) -> tuple[int, tuple[AlignedWord, ...]]:
    """(cost, alignment) of the cheapest alignment; optional deletions appear as correct."""
    rows, cols = len(ref.arcs), len(hyp.arcs)
    cost = [[math.inf] * cols for _ in range(rows)]
    back: list[list[tuple | None]] = [[None] * cols for _ in range(rows)]
    cost[0][0] = 0

    def relax(i: int, j: int, value: float, step: tuple) -> None:
        if value < cost[i][j]:
            cost[i][j] = value
            back[i][j] = step

    for i in range(rows):
        for j in range(cols):
            here = cost[i][j]
            if here == math.inf:
                continue
            for i2, r in ref.arcs[i]:
                if r is None:
                    relax(i2, j, here, (i, j, None))
                    continue
                for j2, h in hyp.arcs[j]:
                    if h is not None:
                        match = words_match(r, h)
                        op = CORRECT if match else SUBSTITUTION
                        relax(
                            i2,
                            j2,
                            here + (0 if match else SUB_COST),
                            (i, j, AlignedWord(op, r.text, h.text), r.optional),
                        )
                if r.optional:
                    relax(i2, j, here + OPTIONAL_DEL_COST, (i, j, AlignedWord(CORRECT, r.text, None)))
                else:
                    relax(i2, j, here + DEL_COST, (i, j, AlignedWord(DELETION, r.text, None)))
            for j2, h in hyp.arcs[j]:
                if h is None:
                    relax(i, j2, here, (i, j, None))
                else:
                    relax(i, j2, here + INS_COST, (i, j, AlignedWord(INSERTION, None, h.text)))
    i, j = ref.final, hyp.final
    total = cost[i][j]
    columns = []
    while (i, j) != (0, 0):
        step = back[i][j]
        if step[2] is not None:
            columns.append(step[2])
        i, j = step[0], step[1]
    return int(total), tuple(reversed(columns))
