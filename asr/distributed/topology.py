"""Who talks to whom: node groups (super-learners) and ADPSGD's bipartite graphs: the fixed
ring, the random ring and the one-peer exponential graph, and how fast each mixes.

Learners (ranks) are grouped into nodes of `learners_per_node` consecutive ranks, as
torchrun numbers them. ADPSGD runs on a ring of nodes (of learners when every node has one
learner). The ring is split into *active* (even) and *passive* (odd) members: only an active
member starts a weight exchange, and only with a passive neighbour, so two exchanges can never
wait on each other (Lian et al. 2018, Sec. 4). A ring of odd size is not bipartite (its last
and first members are both even), so for odd sizes the edge between them is left out and the
ring becomes a path, which is still connected.

The partner of an active member at step t is `neighbours[t % len(neighbours)]`: on an even
ring every active member averages with its left neighbour on even steps and its right one on
odd steps, which pairs every member exactly once per step. Because the schedule is a function
of the step, a passive member knows how many exchanges to expect up to any step, which is how
checkpoints are taken without missing one in flight.

`RandomRing` (distributed.topology=random_ring) keeps the active/passive split but draws a new
random matching between the active and the passive members every round, from a seed all
learners share (Zhang et al., ICASSP 2020: a random neighbour each exchange mixes faster than
a fixed ring). An active member's partner at its step s is its partner in round s, so every
learner computes the whole schedule by itself: no message agrees on it, and since only actives
start exchanges, two exchanges still never wait on each other. Any active may now meet any
passive, so every passive serves (and expects a goodbye from) every active.

`Exponential` (distributed.topology=exponential) is the one-peer exponential graph of
stochastic gradient push (Assran et al., ICML 2019): at step t a member talks to the peer at
distance 2^k, k = t mod log2(n). SGP pushes along a directed edge; ADPSGD averages a pair, so
the pairing must be a matching: member i pairs with i XOR 2^k (at distance 2^k, up or down),
the hypercube's k-th dimension, which needs n a power of two. On the hypercube the even/odd
split is not bipartite (i XOR 2 has i's parity), but the parity of the number of one bits is:
flipping one bit flips it. So actives are the members with an even number of one bits, every
step is a perfect matching of actives with passives, and as on the rings only actives start
exchanges, which keeps them deadlock-free; a passive serves its log2(n) neighbours, all active,
and expects a goodbye from each. After log2(n) steps of exact pairwise averages every member
holds the mean (each step averages out one bit of the index).

`mixing_rate` is the per-step consensus rate of a schedule: the second-largest eigenvalue
modulus of its expected mixing matrix E[W] (W_t: the step's pairwise averages, x <- W_t x),
over one period of a fixed schedule or the random ring's matchings. It describes the
exchanges alone: delay-by-one and the learners' timing are not in it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asr.distributed.config import TOPOLOGIES
from asr.utils.errors import InputError


def node_groups(world_size: int, learners_per_node: int) -> list[list[int]]:
    """Consecutive ranks per node: [[0..L-1], [L..2L-1], ...]."""
    if learners_per_node < 1 or world_size % learners_per_node:
        raise InputError(
            f"distributed.learners_per_node={learners_per_node} does not divide the {world_size} learners; "
            "choose a divisor of the number of processes (0 = processes per node from torchrun)"
        )
    return [list(range(start, start + learners_per_node)) for start in range(0, world_size, learners_per_node)]


@dataclass(frozen=True)
class Ring:
    """ADPSGD's communication graph over `size` members (nodes or learners)."""

    size: int

    def is_active(self, member: int) -> bool:
        return member % 2 == 0

    def neighbours(self, member: int) -> list[int]:
        """[left, right] on the ring, without duplicates and without the odd ring's wrap edge."""
        n = self.size
        if n < 2:
            return []
        left, right = (member - 1) % n, (member + 1) % n
        found = []
        for other in (left, right):
            wraps = {member, other} == {0, n - 1} and n > 2
            if (wraps and n % 2) or other in found:
                continue
            found.append(other)
        return found

    def partner(self, active: int, step: int) -> int:
        """The passive neighbour `active` averages with at `step`."""
        neighbours = self.neighbours(active)
        return neighbours[step % len(neighbours)]

    def active_neighbours(self, passive: int) -> list[int]:
        return [m for m in self.neighbours(passive) if self.is_active(m)]

    def pairs(self, step: int) -> list[tuple[int, int]]:
        """(active, passive) exchanges of one step, actives in ascending order."""
        return [(a, self.partner(a, step)) for a in range(self.size) if self.is_active(a) and self.neighbours(a)]


@dataclass(frozen=True)
class RandomRing:
    """A random perfect matching between the active (even) and passive (odd) members per round.

    With an odd number of members there is one active more than passives: every passive is
    matched once and the extra active (a random one each round) averages with a random passive
    too, which then serves two exchanges that round (as the fixed odd ring's middle members do).
    """

    size: int
    seed: int = 0

    def is_active(self, member: int) -> bool:
        return member % 2 == 0

    def neighbours(self, member: int) -> list[int]:
        """Every member of the other role: each is a possible partner."""
        if self.size < 2:
            return []
        return [m for m in range(self.size) if self.is_active(m) != self.is_active(member)]

    def active_neighbours(self, passive: int) -> list[int]:
        return [m for m in self.neighbours(passive) if self.is_active(m)]

    def matching(self, step: int) -> dict[int, int]:
        """active -> passive for round `step`: the same on every learner (a function of seed and step)."""
        actives = list(range(0, self.size, 2))
        passives = list(range(1, self.size, 2))
        if not passives:
            return {}
        rng = np.random.default_rng([self.seed, step])
        order = rng.permutation(len(actives))
        taken = rng.permutation(len(passives))
        return {actives[a]: passives[taken[i % len(passives)]] for i, a in enumerate(order)}

    def partner(self, active: int, step: int) -> int:
        return self.matching(step)[active]

    def pairs(self, step: int) -> list[tuple[int, int]]:
        """(active, passive) exchanges of one round, actives in ascending order."""
        return sorted(self.matching(step).items())


@dataclass(frozen=True)
class Exponential:
    """The one-peer exponential graph as a matching: i pairs with i XOR 2^(step mod log2 size)."""

    size: int

    def __post_init__(self):
        if self.size & (self.size - 1):
            raise InputError(
                f"distributed.topology=exponential needs a power-of-two number of nodes, not {self.size}; "
                "change the number of learners (or distributed.learners_per_node), or use ring or random_ring"
            )

    @property
    def dimensions(self) -> int:
        return self.size.bit_length() - 1

    def is_active(self, member: int) -> bool:
        return bin(member).count("1") % 2 == 0

    def neighbours(self, member: int) -> list[int]:
        return [member ^ (1 << k) for k in range(self.dimensions)]

    def active_neighbours(self, passive: int) -> list[int]:
        return [m for m in self.neighbours(passive) if self.is_active(m)]

    def partner(self, active: int, step: int) -> int:
        return active ^ (1 << (step % self.dimensions))

    def pairs(self, step: int) -> list[tuple[int, int]]:
        """(active, passive) exchanges of one step, actives in ascending order."""
        if self.size < 2:
            return []
        return [(a, self.partner(a, step)) for a in range(self.size) if self.is_active(a)]


Topology = Ring | RandomRing | Exponential
RANDOM_ROUNDS = 2000  # rounds of a random schedule averaged into its expected mixing matrix


def make_ring(size: int, topology: str = "ring", seed: int = 0) -> Topology:
    if topology == "ring":
        return Ring(size)
    if topology == "random_ring":
        return RandomRing(size, seed)
    if topology == "exponential":
        return Exponential(size)
    raise InputError(f"distributed.topology={topology!r}: choose one of {', '.join(TOPOLOGIES)}")


def mixing_matrix(graph: Topology, step: int) -> np.ndarray:
    """W of one step: its exchanges applied one after another, in the order the lockstep
    simulator applies them (an odd random ring's doubly served passive averages twice)."""
    w = np.eye(graph.size)
    for active, passive in graph.pairs(step):
        pair = np.eye(graph.size)
        pair[[active, active, passive, passive], [active, passive, active, passive]] = 0.5
        w = pair @ w
    return w


def period(graph: Topology) -> int:
    """Steps after which a fixed schedule repeats; RANDOM_ROUNDS drawn rounds of an odd random ring."""
    if isinstance(graph, RandomRing):
        return RANDOM_ROUNDS
    if isinstance(graph, Exponential):
        return max(graph.dimensions, 1)
    return 2


def expected_mixing_matrix(graph: Topology) -> np.ndarray:
    if isinstance(graph, RandomRing) and graph.size % 2 == 0 and graph.size > 1:
        # Exactly: an active meets each of the n/2 passives with probability 2/n, and averages.
        roles = np.array([graph.is_active(m) for m in range(graph.size)])
        return np.eye(graph.size) / 2 + (roles[:, None] != roles[None, :]) / graph.size
    steps = period(graph)
    return sum(mixing_matrix(graph, step) for step in range(steps)) / steps


def mixing_rate(graph: Topology) -> float:
    """The second-largest eigenvalue modulus of E[W]: how much of the learners' disagreement
    an average step leaves (0: one step reaches consensus; 1: it never mixes)."""
    if graph.size < 2:
        return 0.0
    moduli = sorted(np.abs(np.linalg.eigvals(expected_mixing_matrix(graph))), reverse=True)
    return float(moduli[1])


@dataclass(frozen=True)
class Layout:
    """One learner's place: its node (super-learner), the node's leader, the ring of nodes.

    ADPSGD is the case learners_per_node=1 (every learner a node of its own); SSGD's
    communication is the case of a single node.
    """

    rank: int
    world_size: int
    learners_per_node: int
    topology: str = "ring"  # ring | random_ring | exponential: how active and passive nodes are paired
    seed: int = 0  # random_ring: the seed every learner draws the matchings from

    @property
    def nodes(self) -> list[list[int]]:
        return node_groups(self.world_size, self.learners_per_node)

    @property
    def num_nodes(self) -> int:
        return self.world_size // self.learners_per_node

    @property
    def node(self) -> int:
        return self.rank // self.learners_per_node

    @property
    def local_index(self) -> int:
        """This learner's place inside its node (0 = the leader)."""
        return self.rank % self.learners_per_node

    @property
    def is_leader(self) -> bool:
        """The node's first learner claims its batches and writes its checkpoints."""
        return self.local_index == 0

    def leader_of(self, node: int) -> int:
        return node * self.learners_per_node

    def counterpart(self, node: int) -> int:
        """The learner of `node` with this learner's local index: the one it exchanges its
        share of the parameters with when the two nodes average (every learner of a node
        carries 1/learners_per_node of the exchange)."""
        return node * self.learners_per_node + self.local_index

    def exchange_group_ranks(self, local_index: int) -> list[int]:
        """The learners with one local index, one per node: they exchange one share."""
        return [node * self.learners_per_node + local_index for node in range(self.num_nodes)]

    @property
    def ring(self) -> Topology:
        return make_ring(self.num_nodes, self.topology, self.seed)

    @property
    def role(self) -> str:
        """active | passive | alone (one node: nobody to exchange with)."""
        if self.num_nodes == 1:
            return "alone"
        return "active" if self.ring.is_active(self.node) else "passive"
