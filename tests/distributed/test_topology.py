"""Node groups and ADPSGD's bipartite graphs (fixed and random ring, exponential): who
averages with whom, at which step, and how fast each mixes."""

import numpy as np
import pytest

from asr.distributed.topology import (
    Exponential,
    Layout,
    RandomRing,
    Ring,
    expected_mixing_matrix,
    make_ring,
    mixing_matrix,
    mixing_rate,
    node_groups,
)
from asr.utils.errors import InputError


def test_node_groups_are_consecutive_ranks():
    assert node_groups(4, 2) == [[0, 1], [2, 3]]
    assert node_groups(6, 1) == [[0], [1], [2], [3], [4], [5]]
    assert node_groups(4, 4) == [[0, 1, 2, 3]]
    with pytest.raises(InputError, match="learners_per_node=3 does not divide the 4 learners"):
        node_groups(4, 3)


@pytest.mark.parametrize("size", [2, 4, 6, 8, 16])
def test_even_ring_pairs_every_member_once_per_step_alternating_sides(size):
    ring = Ring(size)
    for step in range(4):
        pairs = ring.pairs(step)
        members = [m for pair in pairs for m in pair]
        assert sorted(members) == list(range(size))  # a perfect matching: nobody waits on two
        for active, passive in pairs:
            assert ring.is_active(active) and not ring.is_active(passive)
            side = (active - 1) % size if step % 2 == 0 else (active + 1) % size
            assert passive == side  # left on even steps, right on odd ones
    # Over two steps every ring edge is used once: the mixing graph is the whole ring.
    edges = {frozenset(p) for step in (0, 1) for p in ring.pairs(step)}
    assert edges == {frozenset({m, (m + 1) % size}) for m in range(size)}


def test_two_learners_always_pair_and_one_learner_never_does():
    assert Ring(2).neighbours(0) == [1] and Ring(2).neighbours(1) == [0]
    assert [Ring(2).pairs(s) for s in range(3)] == [[(0, 1)]] * 3
    assert Ring(1).neighbours(0) == [] and Ring(1).pairs(0) == []


@pytest.mark.parametrize("size", [3, 5, 7])
def test_odd_ring_drops_the_wrap_edge_to_stay_bipartite(size):
    ring = Ring(size)
    for member in range(size):
        for other in ring.neighbours(member):
            assert ring.is_active(member) != ring.is_active(other)  # every edge active-passive
    assert ring.neighbours(0) == [1] and ring.neighbours(size - 1) == [size - 2]
    # Still connected: a path 0 - 1 - ... - (size-1).
    edges = {frozenset(p) for step in range(2) for p in ring.pairs(step)}
    assert edges == {frozenset({m, m + 1}) for m in range(size - 1)}


def test_layout_roles_and_leaders():
    layouts = [Layout(rank, 4, 2) for rank in range(4)]
    assert [lay.node for lay in layouts] == [0, 0, 1, 1]
    assert [lay.is_leader for lay in layouts] == [True, False, True, False]
    assert [lay.role for lay in layouts] == ["active", "active", "passive", "passive"]
    assert layouts[3].leader_of(layouts[3].node) == 2
    assert Layout(1, 2, 2).role == "alone" and Layout(3, 4, 1).role == "passive"


@pytest.mark.parametrize("size", [2, 4, 8, 16])
def test_random_ring_pairs_every_member_exactly_once_per_round(size):
    ring = RandomRing(size, seed=5)
    matchings = set()
    for step in range(40):
        pairs = ring.pairs(step)
        members = [m for pair in pairs for m in pair]
        assert sorted(members) == list(range(size))  # a perfect matching
        assert all(
            ring.is_active(a) and not ring.is_active(p) for a, p in pairs
        )  # bipartite: no two exchanges wait on each other
        assert all(ring.partner(a, step) == p for a, p in pairs)
        matchings.add(tuple(pairs))
    # Random: every active meets every passive over the rounds, and the matchings differ.
    met = {frozenset(p) for step in range(300) for p in ring.pairs(step)}
    assert met == {frozenset({a, p}) for a in range(0, size, 2) for p in range(1, size, 2)}
    if size > 2:
        assert len(matchings) > 1


def test_random_ring_is_a_function_of_seed_and_round():
    """Every learner computes the schedule alone: the same seed gives the same matchings."""
    assert [RandomRing(8, 3).pairs(s) for s in range(5)] == [RandomRing(8, 3).pairs(s) for s in range(5)]
    assert [RandomRing(8, 3).pairs(s) for s in range(5)] != [RandomRing(8, 4).pairs(s) for s in range(5)]


@pytest.mark.parametrize("size", [3, 5, 7])
def test_odd_random_ring_matches_every_passive_and_the_extra_active_too(size):
    ring = RandomRing(size, seed=1)
    for step in range(10):
        pairs = ring.pairs(step)
        assert sorted(a for a, _ in pairs) == list(range(0, size, 2))  # every active exchanges each round
        assert set(p for _, p in pairs) == set(range(1, size, 2))  # every passive at least once
        assert all(not ring.is_active(p) for _, p in pairs)


def test_random_ring_passives_serve_and_expect_goodbyes_from_every_active():
    ring = make_ring(6, "random_ring", seed=2)
    assert ring.active_neighbours(3) == [0, 2, 4] and ring.neighbours(0) == [1, 3, 5]
    assert Layout(3, 6, 1, "random_ring", 2).ring == ring
    with pytest.raises(InputError, match="distributed.topology='star'"):
        make_ring(4, "star")


@pytest.mark.parametrize("size", [2, 4, 8, 16])
def test_exponential_pairs_each_member_with_the_peer_at_distance_two_to_the_k(size):
    graph = Exponential(size)
    dims = size.bit_length() - 1
    for step in range(2 * dims):
        pairs = graph.pairs(step)
        assert sorted(m for pair in pairs for m in pair) == list(range(size))  # a perfect matching
        for active, passive in pairs:
            assert graph.is_active(active) and not graph.is_active(
                passive
            )  # bipartite: no two exchanges wait on each other
            assert abs(active - passive) == 2 ** (step % dims)  # k cycles over log2(size)
    for passive in (m for m in range(size) if not graph.is_active(m)):
        # it serves (and waits for the goodbyes of) exactly the actives that ever pick it
        assert sorted(graph.active_neighbours(passive)) == sorted(
            a for s in range(dims) for a, p in graph.pairs(s) if p == passive
        )


def test_exponential_roles_follow_the_parity_of_the_one_bits():
    assert [Exponential(8).is_active(m) for m in range(8)] == [True, False, False, True, False, True, True, False]
    assert Exponential(4).neighbours(0) == [1, 2] and Exponential(4).neighbours(3) == [2, 1]
    assert Layout(3, 4, 1, "exponential").role == "active" and Layout(2, 4, 1, "exponential").role == "passive"
    with pytest.raises(
        InputError, match="distributed.topology=exponential needs a power-of-two number of nodes, not 6"
    ):
        make_ring(6, "exponential")


def test_exponential_reaches_the_mean_in_log2_n_steps():
    w = np.eye(16)
    for step in range(4):
        w = mixing_matrix(Exponential(16), step) @ w
    assert np.allclose(w, np.full((16, 16), 1 / 16))


@pytest.mark.parametrize("size", [4, 8, 16])
def test_mixing_rates_match_the_hand_computed_eigenvalues(size):
    """Fixed ring: E[W] = I/2 + A/4 (A the cycle), eigenvalues 1/2 + cos(2 pi j / n)/2, the
    second largest cos^2(pi / n). Exponential: the hypercube's steps share the Walsh basis, where
    step k keeps a character with bit k clear (eigenvalue 1) and zeroes one with it set, so E[W]
    has 1 - |S| / log2(n) for a bit set S: second largest 1 - 1/log2(n). Random ring: each active
    meets each of the n/2 passives with probability 2/n, E[W] = I/2 + B/n (B the complete
    bipartite graph, eigenvalues +-n/2 and 0), so 1, 0 and 1/2."""
    dims = size.bit_length() - 1
    assert mixing_rate(Ring(size)) == pytest.approx(np.cos(np.pi / size) ** 2)
    assert mixing_rate(Exponential(size)) == pytest.approx(1 - 1 / dims)
    assert mixing_rate(RandomRing(size, seed=1)) == pytest.approx(0.5)
    drawn = (
        sum(mixing_matrix(RandomRing(size, seed=1), step) for step in range(2000)) / 2000
    )  # the same from drawn rounds
    assert np.allclose(drawn, expected_mixing_matrix(RandomRing(size, seed=1)), atol=0.05)
    assert mixing_rate(Ring(1)) == 0.0 and mixing_rate(Exponential(2)) == pytest.approx(0.0)


def test_the_numbers_for_sixteen_nodes():
    assert mixing_rate(Ring(16)) == pytest.approx(0.9619, abs=1e-4)
    assert mixing_rate(Exponential(16)) == pytest.approx(0.75)
    assert (
        0 < mixing_rate(RandomRing(5, seed=1)) < mixing_rate(Ring(5)) == pytest.approx(0.875)
    )  # odd: from drawn rounds; the path mixes slower


def test_the_trainer_refuses_the_exponential_graph_on_six_nodes_before_any_exchange():
    from asr.config import load_config
    from asr.distributed.build import step_group
    from asr.distributed.context import DistributedContext

    cfg = load_config(["distributed=adpsgd", "distributed.topology=exponential"])
    group = step_group(DistributedContext("adpsgd", rank=3, world_size=8, local_world_size=8), cfg)
    assert group.count == 8 and group.layout.role == "active"  # 3 = 0b11: two one bits
    with pytest.raises(InputError, match="exponential needs a power-of-two number of nodes, not 6"):
        step_group(DistributedContext("adpsgd", rank=0, world_size=6, local_world_size=6), cfg)
