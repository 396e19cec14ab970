"""asr.distributed.ssgd's DDP wrapper: every group a DDP model reduces over is referenced until
the process ends, so a Reducer, freed with the GIL held, is never the group's last owner
(asr/distributed/ssgd.py: GROUPS_OF_DDP; without it the preempted exit of
tests/faults/test_preemption_torchrun.py hung now and then)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from asr.distributed.ssgd import GROUPS_OF_DDP, ddp_wrap


def test_every_group_a_ddp_model_reduces_over_is_kept_for_the_process():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        node = dist.new_group([0])  # H-ADPSGD's DDP reduces over the node's group
        for group in (None, node):
            ddp = ddp_wrap(torch.nn.Linear(4, 2), torch.device("cpu"), group, 1.0)
            ddp(torch.randn(3, 4)).sum().backward()  # a gradient all-reduce over the group
            assert GROUPS_OF_DDP[-1] is ddp.process_group
    finally:
        dist.destroy_process_group()
