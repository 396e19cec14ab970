"""Subsets of a data dir made the way Kaldi's Switchboard recipes make them.

    train_dev    utils/subset_data_dir.sh --first data/train 4000     (the first 4,000 utterances)
    train_nodev  utils/subset_data_dir.sh --last  data/train N-4000   (the rest)
    train_nodup  utils/data/remove_dup_utts.sh 300 train_nodev        (repeated transcripts capped)

"First" means first in the data dir's sorted order, so train_dev is whole conversation sides
at the start of the corpus. remove_dup_utts.sh thins transcripts that occur `max_count` times
or more ("uh-huh", "yeah") with its own predictable random sequence; we use the same sequence,
so the same utterances are kept as in Kaldi's train_nodup.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterator

from asr.data.datadir import DataDir
from asr.utils.errors import InputError

# remove_dup_utts.sh's generator: k <- (k + 103349) mod 71147, returning k / 71147.
_STEP, _MODULUS = 103349, 71147


def split_first(d: DataDir, count: int, what: str = "data.dev_utts", corpus: str = "the data") -> tuple[DataDir, DataDir]:
    """(rest, first `count` utterances) in sorted order."""
    utts = d.utts
    if not 0 < count < len(utts):
        raise InputError(f"{what}={count} but {corpus} has {len(utts)} utterances; choose 0 < {what.split('.')[-1]} < {len(utts)}")
    return d.subset(utts[count:]), d.subset(utts[:count])


def kaldi_random() -> Iterator[float]:
    k = 0
    while True:
        k = (k + _STEP) % _MODULUS
        yield k / _MODULUS


def kept_after_capping_duplicates(texts: list[str], max_count: int) -> list[bool]:
    """For transcripts in data-dir order: whether remove_dup_utts.sh keeps each.

    A transcript seen n >= max_count times is kept with probability max_count / n, drawing
    from the generator only for those (as the Perl's short-circuit `||` does).
    """
    if max_count <= 1:
        raise InputError(f"data.max_duplicates={max_count}: must be > 1 (Kaldi uses 300), or 0 to keep every utterance")
    counts = Counter(texts)
    draws = kaldi_random()
    return [counts[t] < max_count or next(draws) < max_count / counts[t] for t in texts]


def remove_duplicates(d: DataDir, max_count: int) -> DataDir:
    """The data dir with over-represented transcripts thinned (remove_dup_utts.sh)."""
    utts = d.utts
    texts = [" ".join(d.text[u].split()) for u in utts]
    keep = kept_after_capping_duplicates(texts, max_count)
    return d.subset(u for u, k in zip(utts, keep) if k)
