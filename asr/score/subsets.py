"""Which scoring subset an utterance belongs to.

Hub5-2000 (eval2000) mixes two test sets told apart by the utterance id prefix (LDC
naming): `sw_` is the Switchboard part (`swb`), `en_` the CallHome part (`callhome`).
Every set also gets `total`, over all utterances. A set with neither prefix (a dev set such
as train_dev, whose ids are `sw02001-A_...`) is reported as `total` only; ids with neither
prefix in a Hub5 set count towards `total` alone.
"""

from __future__ import annotations

from typing import Iterable

TOTAL = "total"
# Report order is the order of this dict, then TOTAL.
HUB5_PREFIXES = {"swb": "sw_", "callhome": "en_"}


def subset_of(utt: str) -> str | None:
    """The Hub5 subset of an utterance id, or None when it has no Hub5 prefix."""
    for name, prefix in HUB5_PREFIXES.items():
        if utt.startswith(prefix):
            return name
    return None


def subsets_of(utt: str) -> list[str]:
    """Every subset whose counts include this utterance (always ends with TOTAL)."""
    subset = subset_of(utt)
    return [subset, TOTAL] if subset else [TOTAL]


def reported_subsets(utts: Iterable[str]) -> list[str]:
    """Subset names to report for a set, in report order: the Hub5 subsets present, then total."""
    present = {subset_of(utt) for utt in utts}
    return [name for name in HUB5_PREFIXES if name in present] + [TOTAL]
