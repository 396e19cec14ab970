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
connects its pairs on first use) is left out. Rank 0 writes
{"exchange_s": [seconds per round], "share_elements": ...} to FILE.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from asr.distributed.exchange import PointToPoint
from asr.distributed.hadpsgd import make_groups
from asr.distributed.topology import Layout
from asr.utils.atomic import write_text

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


def swap_times(layout: Layout, transport: PointToPoint, elements: int, rounds: int) -> list[float]:
    """This learner's seconds per round (0.0 where its node sat the round out)."""
    mine, theirs = torch.randn(elements), torch.empty(elements)
    times = []
    for step in range(rounds):
        dist.barrier()
        pair = partner(layout, step)
        started = time.perf_counter()
        if pair is not None:
            transport.swap(mine, theirs, *pair)
        times.append(time.perf_counter() - started)
    return times


def round_times(per_learner: list[list[float]]) -> list[float]:
    """Each round's exchange time: its slowest learner's swap, warm-up rounds left out."""
    return [max(times) for times in zip(*per_learner)][WARMUP_ROUNDS:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.bench.link_probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--parameters", type=int, required=True, help="weights of the model (float32)")
    parser.add_argument("--rounds", type=int, default=11, help="exchanges, the first one a warm-up (at least 2)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    layout = Layout(rank, world, int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
    groups = make_groups(layout)
    elements = math.ceil(args.parameters / layout.learners_per_node)
    times = swap_times(layout, PointToPoint(groups.exchange), elements, args.rounds)
    gathered: list = [None] * world
    dist.all_gather_object(gathered, times)
    if rank == 0:
        report = {"exchange_s": round_times(gathered), "share_elements": elements, "learners": world}
        write_text(args.out, json.dumps(report) + "\n")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
