"""Configuration of distributed training (Hydra group `distributed`)."""

from dataclasses import dataclass
from typing import ClassVar

from asr.utils.checks import NON_NEGATIVE, POSITIVE, Check, one_of

TOPOLOGIES = ("ring", "random_ring", "exponential")  # asr.distributed.topology

ALGORITHMS = ("none", "ssgd", "adpsgd", "hadpsgd")


def bucket_size(value) -> str | None:
    """distributed.bucket_cap_mb: auto, or a positive number of MB."""
    if value == "auto":
        return None
    try:
        megabytes = float(value)
    except (TypeError, ValueError):
        megabytes = 0.0
    return None if megabytes > 0 else "choose auto or a positive number of MB"


@dataclass
class DistributedConfig:
    # none: one learner | ssgd: gradient all-reduce every step | adpsgd: ring weight averaging
    # with one neighbour per step, overlapped with compute | hadpsgd: all-reduce inside a node,
    # adpsgd between nodes. Processes come from torchrun (--nproc-per-node, --nnodes).
    algorithm: str = "none"
    backend: str = "auto"  # auto (nccl for CUDA devices, gloo on CPU) | gloo | nccl
    # H-ADPSGD super-learner size; 0 = torchrun's processes per node (LOCAL_WORLD_SIZE).
    # Set it to act as several nodes on one machine (4 processes, 2 -> 2 nodes x 2).
    learners_per_node: int = 0
    # A collective or neighbour exchange that waits longer than this is an error (a learner
    # hung or died), reported with the learner's rank. Epoch ends wait for the slowest learner.
    timeout_s: float = 1800.0
    # DistributedDataParallel's gradient buckets (SSGD, and inside an H-ADPSGD node), in MB: the
    # all-reduce of a bucket starts as soon as its gradients are ready, during the backward pass.
    # auto: a quarter of the model's gradients, within [1, 25] (asr/distributed/ssgd.py).
    bucket_cap_mb: str = "auto"  # held as text: OmegaConf 2.3 fails on a float-or-text Union here
    # ADPSGD/H-ADPSGD: after the epoch-end average (evaluated and saved), every learner continues
    # from its own weights (false, the algorithm as published) or from the average (true).
    restart_from_average: bool = False
    # ADPSGD/H-ADPSGD: which passive node an active node averages with at each step. ring: its
    # left and right neighbours in turn; random_ring: a random active/passive matching per
    # round, drawn from the experiment's seed on every learner; exponential: the one-peer
    # exponential graph, the node at distance 2^k with k cycling (a power-of-two number of
    # nodes; asr/distributed/topology.py).
    topology: str = "ring"
    # ADPSGD/H-ADPSGD: an active node applies the average it started at step t at step t + 1,
    # so the exchange overlaps a whole step (forward, backward and update) instead of one
    # forward and backward (Zhang et al., ICASSP 2020).
    delay_by_one: bool = False

    CHECKS: ClassVar[dict[str, Check]] = {
        "algorithm": one_of(*ALGORITHMS),
        "backend": one_of("auto", "gloo", "nccl"),
        "learners_per_node": NON_NEGATIVE,
        "timeout_s": POSITIVE,
        "bucket_cap_mb": bucket_size,
        "topology": one_of(*TOPOLOGIES),
    }
