"""Subsets of a data dir made the way Kaldi's Switchboard recipes make them.

    train_dev    utils/subset_data_dir.sh --first data/train 4000     (the first 4,000 utterances)
    train_nodev  utils/subset_data_dir.sh --last  data/train N-4000   (the rest)
    train_nodup  utils/data/remove_dup_utts.sh 300 train_nodev        (repeated transcripts capped)

"First" means first in the data dir's sorted order, so train_dev is whole conversation sides
at the start of the corpus. remove_dup_utts.sh thins transcripts that occur `max_count` times
or more ("uh-huh", "yeah") with its own predictable random sequence; we use the same sequence,
so the same utterances are kept as in Kaldi's train_nodup. Both work on streamed data dirs,
one utterance at a time: the first N are the first N read (asr.data.prepare checks N with
`check_first`), and the duplicate cap reads its data dir twice, to count the transcripts and
then to choose.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable, Iterator

from asr.data.datadir import StreamedDataDir
from asr.utils.errors import InputError

# remove_dup_utts.sh's generator: k <- (k + 103349) mod 71147, returning k / 71147.
_STEP, _MODULUS = 103349, 71147


def check_first(count: int, total: int, what: str = "data.dev_utts", corpus: str = "the data") -> None:
    """`count` must leave utterances on both sides of the split."""
    if not 0 < count < total:
        name = what.split(".")[-1]
        raise InputError(f"{what}={count} but {corpus} has {total} utterances; choose 0 < {name} < {total}")


def kaldi_random() -> Iterator[float]:
    k = 0
    while True:
        k = (k + _STEP) % _MODULUS
        yield k / _MODULUS


def duplicate_cap(texts: Iterable[str], max_count: int) -> Callable[[str], bool]:
    """remove_dup_utts.sh's choice: counts `texts`, then, given each transcript in data-dir
    order, says whether its utterance is kept.

    A transcript seen n >= max_count times is kept with probability max_count / n, drawing
    from the generator only for those (as the Perl's short-circuit `||` does).
    """
    if max_count <= 1:
        raise InputError(f"data.max_duplicates={max_count}: must be > 1 (Kaldi uses 300), or 0 to keep every utterance")
    counts = Counter(texts)
    draws = kaldi_random()
    return lambda text: counts[text] < max_count or next(draws) < max_count / counts[text]


def _squeezed(text: str) -> str:
    return " ".join(text.split())


def remove_duplicates(d: StreamedDataDir, max_count: int) -> StreamedDataDir:
    """The data dir with over-represented transcripts thinned (remove_dup_utts.sh), holding a
    count per distinct transcript; to be read once (the choices draw from one sequence)."""
    keeps = duplicate_cap((_squeezed(u.text) for u in d), max_count)
    return StreamedDataDir(d.recordings, lambda: (u for u in d if keeps(_squeezed(u.text))))
