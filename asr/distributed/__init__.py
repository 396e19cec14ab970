"""Distributed training on torch.distributed: SSGD, ADPSGD and H-ADPSGD (launched by
torchrun), and the same algorithms simulated with N virtual learners in one process.

    context.py     rank, device, backend (gloo on CPU, NCCL on GPUs), small collectives
    topology.py    node groups and ADPSGD's bipartite graphs: fixed or random ring, exponential
                   (who averages with whom, when; how fast they mix)
    ssgd.py        synchronous SGD: weighted gradient all-reduce every step
    exchange.py    ADPSGD's pairwise weight exchange on its own thread and process group
    adpsgd.py      the ADPSGD / H-ADPSGD updater
    hadpsgd.py     the node and exchange process groups
    build.py       the updater of distributed.algorithm for this learner
    simulation.py  the virtual nodes of the three algorithms (the lockstep reference is in
                   tests/distributed/lockstep.py)
    timed.py       the three on a clock: speeds, staleness, first-come-first-served batches, delay-by-one
"""
