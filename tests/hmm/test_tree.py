"""The decision tree (asr/hmm/tree.py, asr/kaldi/tree.py) against Kaldi's own code in kaldi_hmm_gmm
(ContextDependency's Read/Write/Compute, TransitionModel) and against hand-made references:
stats equal a frame-by-frame acc-tree-stats, the tree reduces to the monophone tree, splits
never lower the objective, a context that matters is asked first."""

import hashlib
import itertools
import struct

import kaldi_hmm_gmm as khg
import numpy as np
import pytest

from asr.hmm.tree import (
    PDF_CLASS,
    TreeStats,
    TreeStatsAccumulator,
    build_tree,
    cluster_phones,
    compile_questions,
    event_leaves,
    gauss_objf,
    kaldi_questions,
    objf_given_tree,
    pdf_gaussians,
)
from asr.kaldi.tree import (
    Constant,
    Split,
    Table,
    context_dependency,
    event_map_bytes,
    load_context_dependency,
    read_roots,
    read_tree,
    read_tree_stream,
    tree_bytes,
    write_tree,
)
from asr.utils.errors import InputError
from tests.hmm.kaldi_reference import (
    KALDI_PHONE_SETS,
    KALDI_TREES,
    SEEDS,
    STATS_SHA1,
    phone_sets_digest,
    phone_stats,
)

SIL = 1
PHONES = [1, 2, 3, 4, 5, 6]  # 1 is silence
TOPO = """<Topology>
<TopologyEntry>
<ForPhones>
2 3 4 5 6
</ForPhones>
<State> 0 <PdfClass> 0 <Transition> 0 0.75 <Transition> 1 0.25 </State>
<State> 1 <PdfClass> 1 <Transition> 1 0.75 <Transition> 2 0.25 </State>
<State> 2 <PdfClass> 2 <Transition> 2 0.75 <Transition> 3 0.25 </State>
<State> 3 </State>
</TopologyEntry>
<TopologyEntry>
<ForPhones>
1
</ForPhones>
<State> 0 <PdfClass> 0 <Transition> 0 0.5 <Transition> 1 0.5 </State>
<State> 1 <PdfClass> 1 <Transition> 1 0.5 <Transition> 2 0.5 </State>
<State> 2 <PdfClass> 2 <Transition> 2 0.5 <Transition> 3 0.5 </State>
<State> 3 </State>
</TopologyEntry>
</Topology>
"""
STATES = 3
ROOTS = [[p] for p in PHONES]


@pytest.fixture(scope="module")
def topo():
    topo = khg.HmmTopology()
    topo.read(TOPO)
    return topo


@pytest.fixture(scope="module")
def mono_model(topo):
    ctx = khg.monophone_context_dependency(PHONES, topo.get_phone_to_num_pdf_classes())
    return khg.TransitionModel(ctx_dep=ctx, hmm_topo=topo)


def synthetic_stats(seed=0, dim=4, right_effect=None, context_noise=0.05):
    """Stats of every (left, phone, right, pdf-class) with Gaussian frames whose mean depends on
    the phone and pdf-class (and, with right_effect=(phone, right phones, shift), on the right
    phone); silence records no context, as acc-tree-stats --ci-phones does."""
    rng = np.random.default_rng(seed)
    means = rng.normal(0, 3, (max(PHONES) + 1, STATES, dim))
    rows, counts, sums, sumsq = [], [], [], []
    contexts = [0, *PHONES]
    for left, phone, right in itertools.product(contexts, PHONES, contexts):
        if phone == SIL and (left, right) != (0, 0):
            continue
        for state in range(STATES):
            mean = means[phone, state] + context_noise * rng.normal(size=dim)
            if right_effect and phone == right_effect[0] and right in right_effect[1]:
                mean = mean + right_effect[2]
            frames = rng.normal(mean, 1.0, (int(rng.integers(5, 40)) * (20 if phone == SIL else 1), dim))
            context = (-1, phone, -1) if phone == SIL else (left, phone, right)
            rows.append((*context, state))
            counts.append(len(frames))
            sums.append(frames.sum(0))
            sumsq.append((frames * frames).sum(0))
    return TreeStats(np.array(rows, np.int32), np.array(counts, float), np.array(sums), np.array(sumsq))


def questions_for(stats, *extra):
    clustered = cluster_phones(stats, ROOTS)
    return compile_questions([*clustered, [SIL], PHONES[1:], *extra], STATES)


def all_contexts():
    return list(itertools.product([0, *PHONES], PHONES, [0, *PHONES]))


def kaldi_gauss(count, total, squares, var_floor=0.01):
    return khg.GaussClusterable(total.astype(np.float64), squares.astype(np.float64), var_floor, float(count))


def test_objective_is_kaldis_gauss_clusterable():
    rng = np.random.default_rng(4)
    for count, scale in ((30, 1.0), (3, 0.01), (1, 5.0)):  # 0.01: below the variance floor
        a, b = rng.normal(0, scale, (count, 5)), rng.normal(2, scale, (count + 4, 5))
        packed = [np.r_[1, len(x), x.sum(0), (x * x).sum(0)] for x in (a, b)]
        ka, kb = (kaldi_gauss(len(x), x.sum(0), (x * x).sum(0)) for x in (a, b))
        assert gauss_objf(packed[0]) == pytest.approx(ka.objf(), rel=1e-5)
        merged = gauss_objf(packed[0] + packed[1])
        assert gauss_objf(packed[0]) + gauss_objf(packed[1]) - merged == pytest.approx(ka.distance(kb), rel=1e-4)
    assert gauss_objf(np.zeros(12)) == 0.0


# ---- the file format against Kaldi's own Write/Read ---------------------------------------


def kaldi_bytes(ctx_dep) -> bytes:
    state = ctx_dep.__getstate__()[0]
    return struct.pack(f"{len(state)}b", *state)


def test_tree_bytes_are_kaldis(topo):
    mono = khg.monophone_context_dependency(PHONES, topo.get_phone_to_num_pdf_classes())
    data = kaldi_bytes(mono)
    tree, width, central = read_tree_stream(__import__("io").BytesIO(data), "mono")
    assert (width, central) == (1, 0) and tree_bytes(tree, width, central) == data
    split = Table(1, (None, Split(2, (3, 5), Constant(0), Split(PDF_CLASS, (0,), Constant(1), Constant(2)))))
    assert kaldi_bytes(context_dependency(split)) == tree_bytes(split)  # Kaldi writes back what it read


def test_tree_file_round_trip(tmp_path):
    stats = synthetic_stats(right_effect=(3, {4, 5}, 4.0))
    built = build_tree(stats, ROOTS, questions_for(stats), num_leaves=40, thresh=0)
    path = tmp_path / "tree"
    write_tree(path, built.tree)
    assert path.read_bytes()[:2] == b"\0B"
    tree, width, central = read_tree(path)
    assert (tree, width, central) == (built.tree, 3, 1)
    loaded = load_context_dependency(path)
    for context in all_contexts():
        for pdf_class in range(STATES):
            assert loaded.compute(list(context), pdf_class) == built.ctx_dep.compute(list(context), pdf_class)


def test_bad_tree_file_is_an_input_error(tmp_path):
    (tmp_path / "tree").write_bytes(b"\0BContextDependency \x04\x03\x00")
    with pytest.raises(InputError, match="tree"):
        read_tree(tmp_path / "tree")
    with pytest.raises(InputError, match="no such tree"):
        read_tree(tmp_path / "missing")


# ---- statistics ---------------------------------------------------------------------------


def transition_ids(model):
    """(phone, hmm state) -> (self-loop tid, forward tid)."""
    out = {}
    for tid in range(1, model.num_transition_ids + 1):
        phone, state, _, _ = model.tuples[model.id2state[tid] - 1].__getstate__()
        loop, forward = out.get((phone, state), (None, None))
        out[(phone, state)] = (tid, forward) if model.is_self_loop(tid) else (loop, tid)
    return out


def random_utterance(rng, tids, dim=3):
    phones = rng.choice(PHONES, size=int(rng.integers(1, 6)))
    alignment = []
    for phone in phones:
        for state in range(STATES):
            loop, forward = tids[(int(phone), state)]
            alignment += [loop] * int(rng.integers(0, 3)) + [forward]
    return np.array(alignment, np.int32), rng.normal(size=(len(alignment), dim)).astype(np.float32)


def reference_stats(model, utterances, ci_phones):
    """acc-tree-stats frame by frame, as src/hmm/tree-accu.cc does."""
    table = {}
    for alignment, feats in utterances:
        phones, pdf_classes, current = [], [], []
        for tid in alignment:
            phone, state, _, _ = model.tuples[model.id2state[tid] - 1].__getstate__()
            current.append(state)  # this topology's pdf-class is its HMM state
            if model.is_final(int(tid)):
                phones.append(phone)
                pdf_classes.append(current)
                current = []
        frame = 0
        for i, phone in enumerate(phones):
            window = [phones[j] if 0 <= j < len(phones) else 0 for j in (i - 1, i, i + 1)]
            if phone in ci_phones:
                window = [-1, phone, -1]
            for pdf_class in pdf_classes[i]:
                x = feats[frame].astype(np.float64)
                count, total, squares = table.get((*window, pdf_class), (0.0, 0.0, 0.0))
                table[(*window, pdf_class)] = (count + 1, total + x, squares + x * x)
                frame += 1
    return table


def test_stats_equal_a_frame_by_frame_reference(mono_model):
    rng = np.random.default_rng(1)
    tids = transition_ids(mono_model)
    utterances = [random_utterance(rng, tids) for _ in range(30)]
    acc = TreeStatsAccumulator(mono_model, ci_phones=[SIL])
    for alignment, feats in utterances:
        assert acc.add(alignment, feats)
    stats = acc.stats()
    reference = reference_stats(mono_model, utterances, {SIL})
    assert len(stats.counts) == len(reference)
    for row, event in enumerate(map(tuple, stats.events.tolist())):
        count, total, squares = reference[event]
        assert stats.counts[row] == count
        np.testing.assert_allclose(stats.sums[row], total, rtol=1e-10)
        np.testing.assert_allclose(stats.sumsq[row], squares, rtol=1e-10)


def test_stats_merge_across_jobs_and_save(mono_model, tmp_path):
    rng = np.random.default_rng(2)
    tids = transition_ids(mono_model)
    utterances = [random_utterance(rng, tids) for _ in range(20)]
    whole, first, second = (TreeStatsAccumulator(mono_model) for _ in range(3))
    for i, (alignment, feats) in enumerate(utterances):
        whole.add(alignment, feats)
        (first if i % 2 else second).add(alignment, feats)
    merged, expected = first.stats().merge(second.stats()), whole.stats()
    np.testing.assert_array_equal(merged.events, expected.events)
    np.testing.assert_allclose(merged.sums, expected.sums)
    merged.save(tmp_path / "tree.acc.npz")
    loaded = TreeStats.load(tmp_path / "tree.acc.npz")
    np.testing.assert_array_equal(loaded.sumsq, merged.sumsq)


def test_bad_alignment_is_skipped(mono_model):
    tids = transition_ids(mono_model)
    acc = TreeStatsAccumulator(mono_model)
    loop, _ = tids[(2, 0)]
    assert not acc.add(np.array([loop, loop]), np.zeros((2, 3)))  # never leaves the phone
    assert not acc.add(np.array([loop]), np.zeros((2, 3)))  # lengths differ
    assert acc.num_skipped == 2
    alignment, feats = random_utterance(np.random.default_rng(0), tids)
    assert acc.add(alignment, feats)
    with pytest.raises(InputError, match="dimension"):
        acc.add(alignment, np.zeros((len(alignment), 5)))
    acc = TreeStatsAccumulator(mono_model)
    with pytest.raises(InputError, match="no utterance"):
        acc.stats()


# ---- questions ----------------------------------------------------------------------------


def test_cluster_phones_finds_groups_of_similar_phones():
    rng = np.random.default_rng(3)
    groups = {2: 0.0, 3: 0.0, 4: 8.0, 5: 8.0, 6: 8.0}  # phones 2,3 alike, 4,5,6 alike
    rows, counts, sums, sumsq = [], [], [], []
    for phone, centre in groups.items():
        frames = rng.normal(centre + 0.3 * phone, 1.0, (200, 2))
        rows.append((0, phone, 0, 1))
        counts.append(200.0)
        sums.append(frames.sum(0))
        sumsq.append((frames * frames).sum(0))
    stats = TreeStats(np.array(rows, np.int32), np.array(counts), np.array(sums), np.array(sumsq))
    sets = cluster_phones(stats, [[p] for p in groups])
    assert sets[:2] == [[2, 3], [4, 5, 6]]  # the first split
    assert all([p] in sets for p in groups)
    assert len(sets) == 2 * len(groups) - 2  # every node of a binary tree over 5 phones but the root, as Kaldi


def test_kaldi_questions_ask_every_position(topo):
    stats = synthetic_stats()
    questions = kaldi_questions(stats, topo, [SIL], PHONES[1:])
    assert (SIL,) in questions.phone_sets and tuple(PHONES[1:]) in questions.phone_sets
    assert questions.pdf_class_sets == ((0,), (0, 1))
    assert list(questions.phone_sets) == sorted(set(questions.phone_sets))


# ---- building -----------------------------------------------------------------------------


def test_as_many_leaves_as_states_is_the_monophone_tree(topo):
    stats = synthetic_stats()
    built = build_tree(
        stats, ROOTS, questions_for(stats), num_leaves=len(PHONES) * STATES, cluster_thresh=0, round_num_leaves=False
    )
    assert built.num_pdfs == len(PHONES) * STATES
    assert all(split.key == PDF_CLASS for split in built.splits)
    mono = khg.monophone_context_dependency(PHONES, topo.get_phone_to_num_pdf_classes())
    renumbering = {}
    for context in all_contexts():
        for pdf_class in range(STATES):
            ok, pdf = built.ctx_dep.compute(list(context), pdf_class)
            mono_ok, mono_pdf = mono.compute([context[1]], pdf_class)
            assert ok and mono_ok
            assert renumbering.setdefault(mono_pdf, pdf) == pdf
    assert sorted(renumbering.values()) == list(range(len(PHONES) * STATES))  # one leaf per state


def test_splits_never_lower_the_objective():
    stats = synthetic_stats(right_effect=(3, {4, 5}, 2.0), context_noise=0.3)
    questions = questions_for(stats)
    objfs = []
    for num_leaves in range(len(PHONES), 60, 4):
        built = build_tree(
            stats, ROOTS, questions, num_leaves=num_leaves, thresh=0, cluster_thresh=0, round_num_leaves=False
        )
        assert built.objf == pytest.approx(built.objf_roots + built.split_gain, rel=1e-9)
        assert built.objf == pytest.approx(objf_given_tree(stats, built.tree), rel=1e-12)
        assert all(split.gain > 0 for split in built.splits)
        objfs.append(built.objf)
    assert objfs == sorted(objfs) and objfs[-1] > objfs[0]


def test_merging_leaves_costs_at_most_the_threshold():
    stats = synthetic_stats(right_effect=(3, {4, 5}, 2.0), context_noise=0.3)
    questions = questions_for(stats)
    split_only = build_tree(stats, ROOTS, questions, num_leaves=70, thresh=0, cluster_thresh=0, round_num_leaves=False)
    clustered = build_tree(stats, ROOTS, questions, num_leaves=70, thresh=0)
    assert clustered.num_pdfs < split_only.num_pdfs and clustered.num_pdfs % 8 == 0
    assert split_only.objf + clustered.cluster_change == pytest.approx(clustered.objf, rel=1e-9)
    assert clustered.cluster_change <= 0
    # pdf ids are 0..n-1 and every context and pdf-class has one
    pdfs = {clustered.ctx_dep.compute(list(c), s)[1] for c in all_contexts() for s in range(STATES)}
    assert pdfs == set(range(clustered.num_pdfs))


def test_a_right_context_that_matters_is_asked_first():
    stats = synthetic_stats(right_effect=(3, {4, 5}, 25.0))
    built = build_tree(stats, ROOTS, questions_for(stats, [4, 5]), num_leaves=40, thresh=0)
    context_splits = [s for s in built.splits if s.key != PDF_CLASS]
    assert context_splits[0].key == 2 and context_splits[0].yes_set == (4, 5)
    assert built.splits.index(context_splits[0]) == 0  # a larger gain than any pdf-class split
    # the tree gives phone 3 before 4 or 5 another pdf than before any other phone
    for pdf_class in range(STATES):
        shifted = {built.ctx_dep.compute([2, 3, r], pdf_class)[1] for r in (4, 5)}
        plain = {built.ctx_dep.compute([2, 3, r], pdf_class)[1] for r in (0, 2, 6)}
        assert shifted.isdisjoint(plain)


def test_silence_is_never_asked_its_context():
    stats = synthetic_stats(context_noise=1.0)
    built = build_tree(stats, ROOTS, questions_for(stats), num_leaves=200, thresh=0, cluster_thresh=0)
    silence = event_leaves(built.tree, np.array([[a, SIL, b, s] for a in PHONES for b in PHONES for s in range(3)]), 3)
    assert len(set(silence.tolist())) <= STATES


def test_kaldi_agrees_with_the_python_tree():
    stats = synthetic_stats(right_effect=(3, {4, 5}, 3.0), context_noise=0.5)
    built = build_tree(stats, ROOTS, questions_for(stats), num_leaves=50, thresh=0)
    events = np.array([(*c, s) for c in all_contexts() for s in range(STATES)])
    ours = event_leaves(built.tree, events, 3)
    kaldi = [built.ctx_dep.compute(list(e[:3]), int(e[3]))[1] for e in events]
    assert ours.tolist() == kaldi


def test_transition_model_builds_from_the_tree(topo):
    stats = synthetic_stats(right_effect=(3, {4, 5}, 3.0))
    built = build_tree(stats, ROOTS, questions_for(stats), num_leaves=30, thresh=0)
    model = khg.TransitionModel(ctx_dep=built.ctx_dep, hmm_topo=topo)
    assert model.num_pdfs == built.num_pdfs
    assert set(model.id2pdf_id[1:]) == set(range(built.num_pdfs))


def test_bad_roots_are_input_errors():
    stats = synthetic_stats()
    questions = questions_for(stats)
    with pytest.raises(InputError, match="no root"):
        build_tree(stats, ROOTS[1:], questions, num_leaves=40)
    with pytest.raises(InputError, match="below the number of roots"):
        build_tree(stats, ROOTS, questions, num_leaves=3)


def test_the_first_split_is_the_best_question_by_kaldis_objective():
    """Brute force over every root, key and question with kaldi_hmm_gmm's GaussClusterable."""
    stats = synthetic_stats(right_effect=(3, {4, 5}, 1.5), context_noise=0.5)
    questions = questions_for(stats, [4, 5])

    def kaldi_objf(rows):
        return kaldi_gauss(stats.counts[rows].sum(), stats.sums[rows].sum(0), stats.sumsq[rows].sum(0)).objf()

    best = (0.0, None, None)
    for phone in PHONES:
        rows = np.flatnonzero(stats.events[:, 1] == phone)
        whole = kaldi_objf(rows)
        for key in (PDF_CLASS, 0, 1, 2):
            values = stats.events[rows, 3 if key == PDF_CLASS else key]
            if (values < 0).any():
                continue
            for yes_set in questions.of_key(key):
                yes = np.isin(values, yes_set)
                if yes.all() or not yes.any():
                    continue
                gain = kaldi_objf(rows[yes]) + kaldi_objf(rows[~yes]) - whole
                if gain > best[0]:
                    best = (gain, key, yes_set)
    built = build_tree(stats, ROOTS, questions, num_leaves=len(ROOTS) + 1, thresh=0, cluster_thresh=0)
    first = built.splits[0]
    assert (first.key, first.yes_set) == best[1:]
    assert first.gain == pytest.approx(best[0], rel=1e-4)


def test_min_count_keeps_small_leaves_out():
    stats = synthetic_stats(context_noise=1.0)
    built = build_tree(stats, ROOTS, questions_for(stats), num_leaves=300, thresh=0, cluster_thresh=0, min_count=400)
    assert built.splits and all(min(s.yes_count, s.no_count) >= 400 for s in built.splits)
    unlimited = build_tree(stats, ROOTS, questions_for(stats), num_leaves=300, thresh=0, cluster_thresh=0)
    assert min(min(s.yes_count, s.no_count) for s in unlimited.splits) < 400


def test_after_merging_no_pair_within_a_root_is_cheaper_than_the_threshold():
    """Kaldi's ClusterEventMapRestrictedByMap: merging stops when every pair of leaves under one
    root would cost more than cluster_thresh (costs from kaldi_hmm_gmm's GaussClusterable)."""
    stats = synthetic_stats(right_effect=(3, {4, 5}, 2.0), context_noise=0.3)
    questions = questions_for(stats)
    split_only = build_tree(stats, ROOTS, questions, num_leaves=70, thresh=0, cluster_thresh=0, round_num_leaves=False)
    threshold = min(s.gain for s in split_only.splits)
    built = build_tree(stats, ROOTS, questions, num_leaves=70, thresh=0, round_num_leaves=False)
    assert built.num_pdfs < split_only.num_pdfs
    leaves = event_leaves(built.tree, stats.events, 3)
    for phone in PHONES:
        pdfs = sorted(set(leaves[stats.events[:, 1] == phone].tolist()))
        gauss = [
            kaldi_gauss(stats.counts[rows].sum(), stats.sums[rows].sum(0), stats.sumsq[rows].sum(0))
            for rows in (np.flatnonzero(leaves == pdf) for pdf in pdfs)
        ]
        for a, b in itertools.combinations(gauss, 2):
            assert a.distance(b) > threshold * (1 - 1e-4)


def test_pdf_gaussians_are_the_leaves_moments():
    stats = synthetic_stats(right_effect=(3, {4, 5}, 3.0))
    built = build_tree(stats, ROOTS, questions_for(stats), num_leaves=30, thresh=0)
    counts, means, variances = pdf_gaussians(stats, built.tree, built.num_pdfs)
    leaves = event_leaves(built.tree, stats.events, 3)
    for pdf in range(built.num_pdfs):
        rows = leaves == pdf
        gauss = kaldi_gauss(stats.counts[rows].sum(), stats.sums[rows].sum(0), stats.sumsq[rows].sum(0))
        assert counts[pdf] == pytest.approx(gauss.count())
        np.testing.assert_allclose(means[pdf], gauss.x_stats() / gauss.count(), rtol=1e-6)
        expected = np.maximum(gauss.x2_stats() / gauss.count() - means[pdf] ** 2, 0.01)
        np.testing.assert_allclose(variances[pdf], expected, rtol=1e-5)


def test_roots_file(tmp_path):
    (tmp_path / "roots.int").write_text("shared split 1\nshared split 2 3\n")
    assert read_roots(tmp_path / "roots.int") == [[1], [2, 3]]
    (tmp_path / "roots.txt").write_text("shared split sil\nshared split ah\n")
    assert read_roots(tmp_path / "roots.txt", {"sil": 1, "ah": 2}) == [[1], [2]]
    (tmp_path / "bad").write_text("not-shared not-split 1\n")
    with pytest.raises(InputError, match="shared split"):
        read_roots(tmp_path / "bad")


@pytest.mark.parametrize("seed, args, expected", KALDI_TREES)
def test_the_tree_is_byte_for_byte_kaldis(seed, args, expected):
    """The trees Kaldi's own BuildTree steps made from the same stats (tests/hmm/kaldi_reference.py)."""
    stats = synthetic_stats(seed=seed, **SEEDS[seed])
    digest = hashlib.sha1(stats.sums.tobytes()).hexdigest()[:16]
    assert digest == STATS_SHA1[seed], "the synthetic stats changed (numpy's random stream?): regenerate the reference"
    max_leaves, thresh, cluster_thresh, round_leaves = args
    built = build_tree(stats, ROOTS, questions_for(stats), max_leaves, thresh, cluster_thresh, round_leaves)
    assert hashlib.sha1(event_map_bytes(built.tree)).hexdigest() == expected


@pytest.mark.parametrize("case", sorted(KALDI_PHONE_SETS))
def test_phone_clusters_are_kaldis(case):
    """The question sets Kaldi's TreeCluster gave for the same stats (tests/hmm/kaldi_reference.py)."""
    stats = phone_stats(*case)
    sets = cluster_phones(stats, [[p] for p in range(1, case[0] + 1)])
    assert phone_sets_digest(sets) == KALDI_PHONE_SETS[case]


def test_kaldi_tree_stats_round_trip(tmp_path):
    stats = synthetic_stats(seed=5)
    stats.save_kaldi(tmp_path / "treeacc")
    data = (tmp_path / "treeacc").read_bytes()
    assert data.startswith(b"\0BBTS \xfc") and b"EV " in data and b"GCL " in data
    loaded = TreeStats.load_kaldi(tmp_path / "treeacc")
    np.testing.assert_array_equal(loaded.events, stats.events)
    np.testing.assert_array_equal(loaded.counts, stats.counts)
    np.testing.assert_array_equal(loaded.sums, stats.sums)
    np.testing.assert_array_equal(loaded.sumsq, stats.sumsq)
    (tmp_path / "cut").write_bytes(data[:-5])
    with pytest.raises(InputError, match="cut"):
        TreeStats.load_kaldi(tmp_path / "cut")
