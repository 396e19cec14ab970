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

and `python -m tests.hmm.kaldi_reference ./kaldi_build_tree`, which prints these lines.
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
    (0, (40, 0, 0, False), "c7e2bcd78164d43623bb5d2076dc37bb9ba4dd33"),
    (0, (70, 0, None, True), "ae8a00ddc94c46956860aeca7df596836d240f7c"),
    (0, (120, 50.0, None, True), "75c8f1b9e8818f93a2096dd1c0eb1585b070c77f"),
    (0, (200, 0, 30.0, False), "d9eb2a9b98dff2aa4e81a89abecea614de30ee4c"),
    (1, (18, 0, 0, False), "a457c096dda76e9e20131faf747ebbd033923406"),
    (1, (40, 0, 0, False), "f7a3dd17a533837a9a18b951d61a90d700804418"),
    (1, (70, 0, None, True), "da18d1d5174dcc12928f2f34284abe78a7a828f2"),
    (1, (120, 50.0, None, True), "93a7b9c32ae48887b7ecbbfe44c8ae8da2e248f6"),
    (1, (200, 0, 30.0, False), "3ad694131d4224b55b82778eddc961992c08399d"),
    (2, (18, 0, 0, False), "e678aaba8d0f6b6b4510813f35d331259e352e19"),
    (2, (40, 0, 0, False), "4cfa5da40337daa41623d722aa263924b4d6dca2"),
    (2, (70, 0, None, True), "b044d0667cec5fa57816509f98a86419e03ab60c"),
    (2, (120, 50.0, None, True), "1df8e11774a22fb0f526fb00165e5eaf7454cb0b"),
    (2, (200, 0, 30.0, False), "01a2f896136c88a55678d74db1cdb0a843cb1e0e"),
]


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


def main(harness: str) -> None:
    from tests.hmm.test_tree import ROOTS, questions_for, synthetic_stats

    with tempfile.TemporaryDirectory() as tmp:
        for seed, options in SEEDS.items():
            stats = synthetic_stats(seed=seed, **options)
            questions = questions_for(stats)
            for args in ARGS:
                (Path(tmp) / "in").write_text(harness_input(stats, ROOTS, questions, args))
                subprocess.run([harness, f"{tmp}/in", f"{tmp}/out"], check=True, capture_output=True)
                print(f'    ({seed}, {args!r}, "{hashlib.sha1((Path(tmp) / "out").read_bytes()).hexdigest()}"),')


if __name__ == "__main__":
    main(sys.argv[1])
