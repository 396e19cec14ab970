"""Kaldi's own build-tree on the synthetic stats of test_tree.py: the SHA-1 of the EventMap that
Kaldi's GetStubMap, SplitDecisionTree, ClusterEventMapRestrictedByMap,
ClusterEventMapToNClustersRestrictedByMap and RenumberEventMap (BuildTree's steps) wrote, in
binary, for each (seed, (max_leaves, thresh, cluster_thresh, round_num_leaves)).

Made by kaldi_build_tree.cc (this directory) compiled against kaldi-asr/kaldi f4007661 (src/base,
src/util, src/tree, src/itf; an empty matrix/matrix-lib.h; a double-precision GaussClusterable):

    g++ -O2 -std=c++17 -I<kaldi>/src -DOPENFST_VER=10800 -DKALDI_DOUBLEPRECISION=0 \\
        kaldi_build_tree.cc <kaldi>/src/{base/kaldi-error,base/kaldi-math,base/io-funcs,\\
        base/kaldi-utils,tree/event-map,tree/build-tree-utils,tree/cluster-utils,\\
        tree/build-tree-questions}.cc -o kaldi_build_tree

and `python -m tests.hmm.kaldi_reference ./kaldi_build_tree ./kaldi_cluster_phones`, which
prints these lines. kaldi_cluster_phones.cc (Kaldi's TreeCluster, for cluster-phones) is built the
same way from src/base and src/tree/cluster-utils.cc; KALDI_PHONE_SETS is the SHA-1 of the sorted
phone sets it gave for phone_stats(*case).
"""

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

STATS_SHA1 = {0: "c79189302a86266e", 1: "16b77c1fa5881259", 2: "8b9c55f6ac91829e"}  # of each seed's sums
SEEDS = {0: dict(right_effect=None, context_noise=0.05), 1: dict(right_effect=(3, {4, 5}, 2.0), context_noise=0.3)}
SEEDS[2] = dict(right_effect=(2, {1, 6}, 1.0), context_noise=1.0)
ARGS = [(18, 0, 0, False), (40, 0, 0, False), (70, 0, None, True), (120, 50.0, None, True), (200, 0, 30.0, False)]
KALDI_TREES = [
    (0, (18, 0, 0, False), "154014fedcf0d0f3c2b20ecedaad464ad6f421af"),
    (0, (40, 0, 0, False), "5d74709224a3995319acf2e7c7e9bbff272141bf"),
    (0, (70, 0, None, True), "e5df80072b47a193420e4dd0451335231c950c36"),
    (0, (120, 50.0, None, True), "75c8f1b9e8818f93a2096dd1c0eb1585b070c77f"),
    (0, (200, 0, 30.0, False), "a4a2c113e2f5c916fb284786af15be3c0476aee8"),
    (1, (18, 0, 0, False), "a457c096dda76e9e20131faf747ebbd033923406"),
    (1, (40, 0, 0, False), "f58769cd377530cbf748f4024928e507b137c1c3"),
    (1, (70, 0, None, True), "cea0c1ec880e920be873c86c9323ce05e8aec971"),
    (1, (120, 50.0, None, True), "93a7b9c32ae48887b7ecbbfe44c8ae8da2e248f6"),
    (1, (200, 0, 30.0, False), "995e308425ce8c877700a7dd06837dc96fd3f2f7"),
    (2, (18, 0, 0, False), "e678aaba8d0f6b6b4510813f35d331259e352e19"),
    (2, (40, 0, 0, False), "175b72e623f6daae39cd0d0d4bb03fc200ce795d"),
    (2, (70, 0, None, True), "f657fcfd2362f7ba9960a564eaa53025b8857e15"),
    (2, (120, 50.0, None, True), "a3df1f625d3de5449f35729fc55783e8758f5683"),
    (2, (200, 0, 30.0, False), "38dd56256451318d49323b80105c67d8751d46a3"),
]


PHONE_SET_CASES = [(6, 4, 0, 3.0), (20, 13, 1, 2.0), (40, 13, 2, 1.0)]  # (phones, dim, seed, spread)
KALDI_PHONE_SETS = {
    (6, 4, 0, 3.0): "12203b64f79630052f400b42397d674d41e09036",
    (20, 13, 1, 2.0): "6c82e2e245e309387146c9e5b3f6c1760b057d30",
    (40, 13, 2, 1.0): "be99dc2ecbd6e0e47b50c44a9d92acd664e83fa0",
}


def phone_stats(num_phones: int, dim: int, seed: int, spread: float):
    """Central-state stats of phones drawn around 5 group means (pdf-class 1, no context)."""
    import numpy as np

    from asr.hmm.tree import TreeStats

    rng = np.random.default_rng(seed)
    groups, member = rng.normal(0, 3, (5, dim)), rng.integers(0, 5, num_phones + 1)
    rows, counts, sums, sumsq = [], [], [], []
    for phone in range(1, num_phones + 1):
        frames = rng.normal(
            groups[member[phone]] + spread * rng.normal(size=dim), 1.0, (int(rng.integers(50, 500)), dim)
        )
        rows.append((0, phone, 0, 1))
        counts.append(len(frames))
        sums.append(frames.sum(0))
        sumsq.append((frames * frames).sum(0))
    return TreeStats(np.array(rows, np.int32), np.array(counts, float), np.array(sums), np.array(sumsq))


def phone_sets_digest(sets) -> str:
    return hashlib.sha1(repr(sorted(tuple(s) for s in sets)).encode()).hexdigest()


def kaldi_phone_sets(harness: str, stats, tmp: str) -> list[tuple[int, ...]]:
    """Kaldi's cluster-phones sets for these stats (each phone its own set)."""
    from asr.hmm.tree import stats_by_value

    phones = sorted(set(stats.events[:, 1].tolist()))
    points = stats_by_value(stats, 1, phones, (1,))
    lines = [f"{stats.dim} {len(phones)}"] + [" ".join(repr(float(v)) for v in row[1:]) for row in points]
    (Path(tmp) / "in").write_text("\n".join(lines) + "\n")
    out = subprocess.run([harness, f"{tmp}/in"], check=True, capture_output=True, text=True).stdout
    clusters = [[phones[int(i)] for i in line.split()] for line in out.splitlines()]
    return list(dict.fromkeys(tuple(s) for s in clusters + [[p] for p in phones] if s))  # no duplicates, as Kaldi


def harness_input(stats, roots, questions, args) -> str:
    """kaldi_build_tree.cc's input: the stats (events without the keys Kaldi leaves out), roots,
    questions and options."""
    lines = [f"{stats.dim} {len(stats.counts)}"]
    for event, count, sums, squares in zip(stats.events, stats.counts, stats.sums, stats.sumsq):
        pairs = [(-1, int(event[3]))] + [(k, int(event[k])) for k in range(3) if event[k] >= 0]
        numbers = [float(count), *map(float, sums), *map(float, squares)]
        lines.append(f"{len(pairs)} " + " ".join(f"{k} {v}" for k, v in pairs) + " " + " ".join(map(repr, numbers)))
    for sets in (roots, questions.phone_sets, questions.pdf_class_sets):
        lines += [str(len(sets))] + [f"{len(s)} " + " ".join(map(str, s)) for s in sets]
    max_leaves, thresh, cluster_thresh, round_leaves = args
    lines.append(f"{max_leaves} {thresh} {-1 if cluster_thresh is None else cluster_thresh} {int(round_leaves)} 3 1")
    return "\n".join(lines) + "\n"


def main(harness: str, cluster_harness: str) -> None:
    from tests.hmm.test_tree import ROOTS, questions_for, synthetic_stats

    with tempfile.TemporaryDirectory() as tmp:
        for case in PHONE_SET_CASES:
            print(f'    {case!r}: "{phone_sets_digest(kaldi_phone_sets(cluster_harness, phone_stats(*case), tmp))}",')
        for seed, options in SEEDS.items():
            stats = synthetic_stats(seed=seed, **options)
            questions = questions_for(stats)
            for args in ARGS:
                (Path(tmp) / "in").write_text(harness_input(stats, ROOTS, questions, args))
                subprocess.run([harness, f"{tmp}/in", f"{tmp}/out"], check=True, capture_output=True)
                print(f'    ({seed}, {args!r}, "{hashlib.sha1((Path(tmp) / "out").read_bytes()).hexdigest()}"),')


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
