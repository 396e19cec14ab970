"""Perplexity of a text under a KenLM model, as KenLM's `query` reports it.

Each sentence is scored with <s> context and </s> at its end (counted as a token); words
outside the vocabulary are mapped to <unk>. `query` gives the perplexity with and without
the OOV words' probabilities, the OOV count and the token count.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from asr.lm.tools import kenlm_tool, run_tool
from asr.utils.errors import InputError

_SUMMARY = {
    "perplexity": r"^Perplexity including OOVs:\s*(\S+)",
    "perplexity_without_oovs": r"^Perplexity excluding OOVs:\s*(\S+)",
    "oovs": r"^OOVs:\s*(\d+)",
    "tokens": r"^Tokens:\s*(\d+)",
}


@dataclass(frozen=True)
class Perplexity:
    perplexity: float  # including OOVs (scored as <unk>)
    perplexity_without_oovs: float
    oovs: int
    tokens: int  # words + one </s> per sentence

    def as_dict(self) -> dict:
        return asdict(self)


def parse_query_summary(output: str) -> Perplexity:
    values = {}
    for key, pattern in _SUMMARY.items():
        match = re.search(pattern, output, re.MULTILINE)
        if not match:
            raise InputError(f"KenLM query printed no {key!r} line; its output was:\n{output[-500:]}")
        values[key] = float(match.group(1)) if key.startswith("perplexity") else int(match.group(1))
    return Perplexity(**values)


def perplexity(lm_path: str | os.PathLike, sentences: list[str], kenlm_bin: str = "") -> Perplexity:
    """Perplexity of `sentences` (one string each) under the ARPA or binary LM at `lm_path`."""
    if not Path(lm_path).is_file():
        raise InputError(f"{lm_path}: language model not found; run `python -m asr.lm` first")
    if not sentences:
        raise InputError("perplexity of an empty text is undefined; give at least one sentence")
    text = "".join(s.strip() + "\n" for s in sentences)
    output = run_tool([kenlm_tool("query", kenlm_bin), "-v", "summary", lm_path], "KenLM query", stdin=text)
    return parse_query_summary(output)
