"""Launch checks: backend from the device, a clear error for a bad launch, one-process no-ops."""

import re
from types import SimpleNamespace

import pytest
import torch

from asr.distributed import context
from asr.distributed.context import DistributedContext, check_gpus_for_nccl, choose_backend, init_distributed
from asr.utils.errors import InputError


def test_backend_follows_the_device():
    assert choose_backend("auto", torch.device("cpu")) == "gloo"
    assert choose_backend("auto", torch.device("cuda", 1)) == "cpu:gloo,cuda:nccl"
    assert choose_backend("nccl", torch.device("cuda", 0)) == "cpu:gloo,cuda:nccl"
    assert choose_backend("gloo", torch.device("cuda", 0)) == "gloo"
    with pytest.raises(InputError, match="backend=nccl needs CUDA devices"):
        choose_backend("nccl", torch.device("cpu"))
    with pytest.raises(InputError, match="choose auto, gloo or nccl"):
        choose_backend("mpi", torch.device("cpu"))


def test_more_learners_on_a_node_than_gpus_under_nccl_is_an_input_error_naming_both():
    with pytest.raises(InputError, match="started 4 learners on this node but it has 2 visible GPU"):
        check_gpus_for_nccl("cpu:gloo,cuda:nccl", 4, 2)
    check_gpus_for_nccl("cpu:gloo,cuda:nccl", 2, 2)
    check_gpus_for_nccl("gloo", 4, 1)  # learners may share a GPU over gloo (tests/gpu does)
    check_gpus_for_nccl("gloo", 2, 0)


def test_a_launch_with_more_learners_than_gpus_stops_before_joining(monkeypatch):
    """What torchrun --nproc-per-node=4 on a node of 2 GPUs meets: the error, not NCCL's."""
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setattr(context, "select_device", lambda requested: torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(context.dist, "init_process_group", lambda **kw: pytest.fail("joined the group"))
    with pytest.raises(InputError, match="4 learners on this node but it has 2 visible GPU"):
        init_distributed(cfg("ssgd"))


def cfg(algorithm):
    return SimpleNamespace(
        distributed=SimpleNamespace(algorithm=algorithm, backend="auto", learners_per_node=0, timeout_s=60.0),
        device="cpu",
    )


def test_launch_without_torchrun_is_one_learner_and_collectives_are_no_ops(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    ctx = init_distributed(cfg("adpsgd"))
    assert (ctx.rank, ctx.world_size, ctx.algorithm, ctx.distributed, ctx.is_writer) == (0, 1, "none", False, True)
    assert ctx.all_reduce_sum([1.5, 2.0]) == [1.5, 2.0]
    assert ctx.broadcast_object({"a": 1}) == {"a": 1} and ctx.gather_objects(7) == [7]
    assert DistributedContext().device == torch.device("cpu")


def test_several_processes_need_a_distributed_algorithm(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(InputError, match="torchrun started 4 processes but distributed=none"):
        init_distributed(cfg("none"))
    with pytest.raises(InputError, match="distributed.algorithm='dp'"):
        init_distributed(cfg("dp"))


def test_a_collective_that_never_returns_ends_the_learner_with_the_message(tmp_path):
    """The last resort behind the backends' own timeouts (NCCL can hang without an error)."""
    import subprocess
    import sys

    script = (
        "import time\n"
        "from asr.distributed.context import WATCHDOG, collective\n"
        "WATCHDOG.arm(0.5, poll_s=0.1)\n"
        "with collective('gradient all-reduce', 3, 0.2):\n"
        "    time.sleep(30)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3  # asr.distributed.context.EXIT_DISTRIBUTED_ERROR
    assert re.search(
        r"learner 3: gradient all-reduce got no answer for \d+ s \(limit 0.5 s: "
        r"distributed.timeout_s=0.2 and a grace\)",
        proc.stderr,
    ), proc.stderr
