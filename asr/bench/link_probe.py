"""One weight exchange on the emulated link, timed alone: what the cluster benchmark's
`weights in X s` becomes on the wire (TCP/IP headers, the other direction's acknowledgements,
gloo's own messages), with nothing else running.

    torchrun --nnodes N --nproc-per-node L ... -m asr.bench.link_probe \
        --parameters P --rounds R --out FILE

Every learner is placed as `asr.train` places it under ADPSGD / H-ADPSGD (topology.py's
Layout, hadpsgd.py's groups: one exchange group per local index) and, at each round, every
learner of a paired node swaps its 1/L share of P float32 weights with its counterpart through
the exchange's own transport (exchange.py's PointToPoint.swap: both directions at once). The
rounds are separated by a barrier. An exchange between two nodes lasts until its slowest share
has landed, so a round's time is the longest swap of any learner; the first round (gloo
connects its pairs on first use) is left out. Rank 0 also reads how long the whole machine's
CPUs were busy over the timed rounds (/proc/stat; the benchmark runs nothing else meanwhile):
on an emulated cluster the hosts' network (TCP, the veth links, the bridge, the rate limit) is
the kernel's work on the same cores the learners compute on, so this is CPU that no overlap
can hide there. With several learners per node it then times, the same way, what the node
does every step besides the exchange: the all-reduce of the whole model's gradients and the
all-gather of the learners' shares of the average (on the node's group, as H-ADPSGD). Rank 0
writes {"exchange_s": [seconds per round], "machine_cpu_s_per_exchange": ...,
"node_collectives_s": [rank 0's seconds per round], "machine_cpu_s_per_node_step": ...} to
FILE (the node's entries with several learners per node only).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Callable

from typing import TYPE_CHECKING

from asr.utils.atomic import write_text

if TYPE_CHECKING:
    from asr.distributed.exchange import PointToPoint
    from asr.distributed.topology import Layout

# torch is imported where it is used, so that --help answers without it (tests/test_help.py).

WARMUP_ROUNDS = 1  # gloo connects a pair on its first message


def partner(layout: Layout, step: int) -> tuple[int, bool] | None:
    """(the counterpart this learner swaps with at `step`, whether it is the active side), or
    None when its node sits this step out."""
    for active, passive in layout.ring.pairs(step):
        if layout.node == active:
            return layout.counterpart(passive), True
        if layout.node == passive:
            return layout.counterpart(active), False
    return None


def busy_cpu_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (/proc/stat: all but idle and
    iowait), or None where there is no /proc/stat."""
    try:
        with open("/proc/stat") as stat:
            ticks = [int(v) for v in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def timed_rounds(rounds: int, work: Callable[[int], None]) -> tuple[list[float], float | None]:
    """`work(round)` after a barrier, `rounds` times: this learner's seconds per round, and the
    CPU seconds the machine was busy over the rounds after the warm-up (None: unknown)."""
    import torch.distributed as dist

    times = []
    busy_from = None
    for step in range(rounds):
        dist.barrier()
        if step == WARMUP_ROUNDS:
            busy_from = busy_cpu_seconds()
        started = time.perf_counter()
        work(step)
        times.append(time.perf_counter() - started)
    dist.barrier()
    busy_to = busy_cpu_seconds()
    return times, (busy_to - busy_from if busy_from is not None and busy_to is not None else None)


def swapping(layout: Layout, transport: PointToPoint, elements: int) -> Callable[[int], None]:
    """A round of exchanges: every learner of a paired node swaps its share with its counterpart."""
    import torch

    mine, theirs = torch.randn(elements), torch.empty(elements)

    def swap(step: int) -> None:
        pair = partner(layout, step)
        if pair is not None:
            transport.swap(mine, theirs, *pair)

    return swap


def node_collectives(node_group, parameters: int, elements: int, learners: int) -> Callable[[int], None]:
    """What H-ADPSGD's node does every step besides the exchange: all-reduce the gradients
    (the whole model) and all-gather the learners' shares of the average."""
    import torch
    import torch.distributed as dist

    gradients, share = torch.randn(parameters), torch.randn(elements)
    shares = list(torch.empty(elements * learners).split(elements))

    def collectives(step: int) -> None:
        dist.all_reduce(gradients, group=node_group)
        dist.all_gather(shares, share, group=node_group)

    return collectives


def per_round(busy: float | None, rounds: int) -> float | None:
    return busy / (rounds - WARMUP_ROUNDS) if busy is not None else None


def round_times(per_learner: list[list[float]]) -> list[float]:
    """Each round's exchange time: its slowest learner's swap, warm-up rounds left out."""
    return [max(times) for times in zip(*per_learner)][WARMUP_ROUNDS:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.bench.link_probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--parameters", type=int, required=True, help="weights of the model (float32)")
    parser.add_argument("--rounds", type=int, default=11, help="exchanges, the first one a warm-up (at least 2)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.rounds <= WARMUP_ROUNDS:
        parser.error(f"--rounds {args.rounds}: at least {WARMUP_ROUNDS + 1} (the first is a warm-up)")
    import torch.distributed as dist

    from asr.distributed.exchange import PointToPoint
    from asr.distributed.hadpsgd import make_groups
    from asr.distributed.topology import Layout

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    layout = Layout(rank, world, int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
    groups = make_groups(layout)
    elements = math.ceil(args.parameters / layout.learners_per_node)
    times, busy = timed_rounds(args.rounds, swapping(layout, PointToPoint(groups.exchange), elements))
    report = {"machine_cpu_s_per_exchange": per_round(busy, args.rounds), "share_elements": elements}
    if layout.learners_per_node > 1:
        node = node_collectives(groups.node, args.parameters, elements, layout.learners_per_node)
        node_times, node_busy = timed_rounds(args.rounds, node)
        report["node_collectives_s"] = node_times[WARMUP_ROUNDS:]
        report["machine_cpu_s_per_node_step"] = per_round(node_busy, args.rounds)
    gathered: list = [None] * world
    dist.all_gather_object(gathered, times)
    if rank == 0:
        report |= {"exchange_s": round_times(gathered), "learners": world}
        write_text(args.out, json.dumps(report) + "\n")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
