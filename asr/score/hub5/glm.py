"""NIST GLM files (format NIST1) and the text processing of SCTK's csrfilt.sh, in Python.

A GLM rule reads `LHS => RHS / [ ] __ [ ] ;; comment`: the words of LHS, bounded by word
boundaries on both sides, become RHS, which may be an alternation `{A / B C}`. Square
brackets around LHS/RHS words (`[CAN'T] => [{CAN'T / CANNOT}]`) mark words and change
nothing. Like SCTK's rfilter1, rules are applied left to right, the longest LHS first at
each word, and output is not rescanned. `;; INPUT_DEPENDENT_APPLICATION = "<regex>"` lines
make the rules after them apply only to inputs (stm/ctm) or purposes (ref/hyp) the regex
matches. Other rule contexts are not supported by the native scorer and are refused.

csrfilt.sh (as hubscr.pl calls it for English: `-dh`) then: upper-cases, maps the text with
the rules (parentheses of optionally deletable words kept apart), splits hyphenated words
(`UH-HUH` -> `UH HUH`, but not fragments `AB-`), and spreads parentheses over the words
inside (`(A B)` -> `(A) (B)`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from asr.utils.errors import InputError
from asr.utils.textfile import iter_lines

WORD_CONTEXT = "[ ] __ [ ]"


@dataclass(frozen=True)
class GlmRule:
    lhs: tuple[str, ...]
    rhs: str
    applies_to: str | None  # the INPUT_DEPENDENT_APPLICATION regex in force, if any


@dataclass(frozen=True)
class Glm:
    rules: tuple[GlmRule, ...]
    path: str = "<memory>"

    def for_input(self, input_type: str, purpose: str) -> "GlmMapper":
        """The rules that apply to `input_type` (stm|ctm) data used as `purpose` (ref|hyp)."""
        active = [
            r
            for r in self.rules
            if r.applies_to is None or re.search(r.applies_to, input_type) or re.search(r.applies_to, purpose)
        ]
        return GlmMapper(active)


def _strip_brackets(text: str) -> str:
    return text.replace("[", " ").replace("]", " ")


def parse_rule(line: str, where: str) -> tuple[tuple[str, ...], str]:
    """`LHS => RHS / [ ] __ [ ] ;; comment` -> (LHS words, RHS text), upper case, brackets dropped."""
    body = line.split(";;", 1)[0].strip()
    if "=>" not in body or "/" not in body.split("=>", 1)[1]:
        raise InputError(f"{where}: not a GLM rule `LHS => RHS / [ ] __ [ ]`: {line.strip()!r}")
    lhs, rest = body.split("=>", 1)
    rhs, context = rest.rsplit("/", 1)  # the context has no '/', an alternation in RHS may
    if " ".join(context.split()) != WORD_CONTEXT:
        raise InputError(
            f"{where}: GLM rule context {context.strip()!r} is not supported by the native scorer "
            f"(only `/ {WORD_CONTEXT}`); install NIST SCTK (`make install`) to score with this GLM"
        )
    words = tuple(_strip_brackets(lhs).upper().split())
    if not words:
        raise InputError(f"{where}: GLM rule with an empty left side: {line.strip()!r}")
    return words, " ".join(_strip_brackets(rhs).upper().split())


def read_glm(path: str | os.PathLike) -> Glm:
    """Parse a NIST1 GLM file (header lines start with `*`, comments with `;;`)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(
            f"{path}: GLM not found; Hub5 scoring needs the LDC2002T43 GLM (the prepare stage copies it "
            "into the data dir; score.glm names another), or score with score=jiwer"
        )
    rules, applies_to = [], None
    for lineno, line in iter_lines(path):
        stripped = line.strip()
        marker = re.match(r';;\s+INPUT_DEPENDENT_APPLICATION\s*=\s*"([^"]*)"', stripped)
        if marker:
            applies_to = marker.group(1).lower()
            continue
        if not stripped or stripped.startswith(";;") or stripped.startswith("*"):
            continue
        lhs, rhs = parse_rule(stripped, f"{path}:{lineno}")
        rules.append(GlmRule(lhs, rhs, applies_to))
    return Glm(tuple(rules), str(path))


class GlmMapper:
    """Applies a set of rules to word sequences (rfilter1's matching)."""

    def __init__(self, rules: list[GlmRule]):
        self.by_first: dict[str, list[GlmRule]] = {}
        for rule in rules:
            self.by_first.setdefault(rule.lhs[0], []).append(rule)
        for candidates in self.by_first.values():
            candidates.sort(key=lambda r: -len(r.lhs))  # longest match first; stable otherwise

    def map_words(self, words: list[str]) -> list[str]:
        out, i = [], 0
        while i < len(words):
            for rule in self.by_first.get(words[i], ()):
                if tuple(words[i : i + len(rule.lhs)]) == rule.lhs:
                    out.extend(rule.rhs.split())
                    i += len(rule.lhs)
                    break
            else:
                out.append(words[i])
                i += 1
        return out


def split_hyphens(text: str) -> str:
    """csrfilt -dh: a hyphen inside a word becomes a space; fragment hyphens stay."""
    return re.sub(r"([^( ])-(?=[^) ])", r"\1 ", text)


def spread_parentheses(text: str) -> str:
    """`( A B )` -> `( A ) ( B )`, as csrfilt's propogateOptDel."""
    pattern = re.compile(r"(\(\s+[^()\s]+\s+)([^()\s]+)")
    while True:
        text, n = pattern.subn(r"\1) ( \2", text, count=1)
        if n == 0:
            return text


def filter_text(text: str, mapper: GlmMapper) -> str:
    """csrfilt.sh -dh on one transcript: upper case, GLM, hyphens, optional-word parentheses."""
    spaced = " " + text.upper().replace("(", "( ").replace(")", " )") + " "
    mapped = " " + " ".join(mapper.map_words(spaced.split())) + " "
    spread = spread_parentheses(split_hyphens(mapped))
    return " ".join(spread.split()).replace("( ", "(").replace(" )", ")")
