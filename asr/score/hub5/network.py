"""sclite's transcript syntax as a word graph: plain words, optionally deletable words
`(WORD)`, alternations `{A / B C / @}` (`@` = nothing), fragments `AB-`.

A `Network` is a DAG whose nodes are numbered so that every arc goes forward; an arc
carries one word, or None for an empty alternative. The aligner (asr.score.hub5.align)
finds the cheapest path pair through a reference and a hypothesis network.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from asr.utils.errors import InputError

NULL = "@"


@dataclass(frozen=True)
class Word:
    text: str  # upper case, without parentheses
    optional: bool = False  # (WORD): deleting it is no error

    @property
    def fragment_prefix(self) -> str | None:
        """`AB-` matches any hypothesis word starting with AB (sclite -F)."""
        return self.text[:-1] if self.text.endswith("-") and len(self.text) > 1 else None


@dataclass
class Network:
    arcs: list[list[tuple[int, Word | None]]] = field(default_factory=lambda: [[]])  # node -> [(next node, word)]

    @property
    def final(self) -> int:
        return len(self.arcs) - 1

    def _new_node(self) -> int:
        self.arcs.append([])
        return len(self.arcs) - 1

    def append_word(self, word: Word) -> None:
        src = self.final
        self.arcs[src].append((self._new_node(), word))

    def append_alternation(self, alternatives: list[list[Word]]) -> None:
        """Parallel paths from the current end to a new common end."""
        start = self.final
        ends = []
        for words in alternatives:
            node = start
            for word in words:
                nxt = len(self.arcs)
                self.arcs.append([])
                self.arcs[node].append((nxt, word))
                node = nxt
            ends.append(node)
        end = self._new_node()
        for node in ends:
            self.arcs[node].append((end, None))

    def extend(self, other: "Network") -> None:
        """Append another network after this one."""
        offset = self.final
        for node, arcs in enumerate(other.arcs):
            moved = [(dst + offset, word) for dst, word in arcs]
            if node == 0:
                self.arcs[offset].extend(moved)
            else:
                self.arcs.append(moved)


def parse_word(token: str, where: str) -> Word | None:
    if token == NULL:
        return None
    if token.startswith("(") or token.endswith(")"):
        if not (token.startswith("(") and token.endswith(")") and len(token) > 2):
            raise InputError(f"{where}: badly formed optionally deletable word {token!r}")
        return Word(token[1:-1].upper(), optional=True)
    return Word(token.upper())


def parse_transcript(text: str, where: str = "transcript") -> Network:
    """A (csrfilt-processed) transcript -> its network."""
    tokens = re.sub(r"([{}/])", r" \1 ", text).split()
    net = Network()
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "{":
            end = _closing_brace(tokens, i, where)
            net.append_alternation(_alternatives(tokens[i + 1 : end], where))
            i = end + 1
            continue
        if token in ("}", "/"):
            raise InputError(f"{where}: {token!r} outside an alternation in {text!r}")
        word = parse_word(token, where)
        if word is not None:
            net.append_word(word)
        i += 1
    return net


def _closing_brace(tokens: list[str], start: int, where: str) -> int:
    for j in range(start + 1, len(tokens)):
        if tokens[j] == "{":
            raise InputError(f"{where}: nested alternations are not supported")
        if tokens[j] == "}":
            return j
    raise InputError(f"{where}: alternation without a closing brace")


def _alternatives(tokens: list[str], where: str) -> list[list[Word]]:
    alternatives, current = [], []
    for token in tokens + ["/"]:
        if token == "/":
            alternatives.append(current)
            current = []
        else:
            word = parse_word(token, where)
            if word is not None:
                current.append(word)
    return alternatives
