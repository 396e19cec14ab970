"""Where a training run starts: afresh, or from what an earlier run of the experiment saved.

Two kinds of checkpoint live in `<exp_dir>/checkpoints/`:

    step-*.pt            one model: every step of SSGD and of a single learner, and the
                         epoch-end average of decentralized training (ADPSGD, H-ADPSGD)
    node-NNN/step-*.pt   one node's own state in decentralized training: its weights,
                         optimizer, progress, its learners' random states, and which of the
                         epoch's utterances it has trained (written without any collective)

Every checkpoint records the utterances of the current epoch trained so far (`trained`, a mask
over the training set), so a run can go on with any number of learners. The starts:

    exact    the newest step-*.pt, same algorithm family and number of learners: model,
             optimizer, schedule, sampler position and every learner's random state come back,
             and the run continues exactly as if never interrupted (SSGD, single learner)
    own      every node's newest node checkpoint, same layout: each node continues from its own
             weights; what is left of the epoch (everything no node had trained) is re-planned
    replan   a step-*.pt with another number of learners, or into decentralized training: every
             learner starts from its model and re-splits what is left of the epoch
    fresh    nothing usable was saved

Node checkpoints from another layout (an elastic restart: `torchrun --nnodes MIN:MAX`, a
preempted job resumed elsewhere) are first merged: learner 0 averages the nodes' weights and
optimizer moments, unites what they trained, saves that as a step-*.pt and removes the node
directories, and every learner then starts from it (replan). So are the node checkpoints of a
layout where some nodes saved none (a learner killed before its node's first checkpoint, after
the others' first): the nodes that saved are merged, and a warning names the nodes whose steps
are trained again; nothing every node saved is lost. Learner 0 decides, every learner
follows, so all start from the same point. Learner 0 also cuts the learners' records of trained
utterances (asr/train/record.py) to what the chosen checkpoints hold.
"""

from __future__ import annotations

import logging
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from asr.distributed.context import DistributedContext
from asr.models.checkpoint import CheckpointDir, load_checkpoint
from asr.train.data import pack_mask, unpack_mask
from asr.train.record import cut_records
from asr.train.trainlog import TrainLog
from asr.utils.errors import InputError

log = logging.getLogger(__name__)

NODE_DIR = "node-{:03d}"


@dataclass(frozen=True)
class RunLayout:
    """What decides how a checkpoint can be continued."""

    decentralized: bool
    world_size: int
    learners_per_node: int  # learners stepping together on one batch: the world for SSGD

    @property
    def num_nodes(self) -> int:
        return self.world_size // self.learners_per_node

    def as_dict(self) -> dict:
        return {
            "decentralized": self.decentralized,
            "world_size": self.world_size,
            "learners_per_node": self.learners_per_node,
        }

    @classmethod
    def from_state(cls, state: dict) -> "RunLayout":
        saved = state.get("layout") or {}
        world = int(state.get("distributed", {}).get("world_size", 1))
        return cls(
            bool(saved.get("decentralized", False)),
            int(saved.get("world_size", world)),
            int(saved.get("learners_per_node", world)),
        )


@dataclass
class Start:
    kind: str  # fresh | exact | own | replan
    state: dict | None = None  # the checkpoint this learner continues from
    done: np.ndarray | None = None  # own/replan: utterances of the epoch trained before this run
    source: str = ""


def node_dir(checkpoints: CheckpointDir, node: int) -> Path:
    return checkpoints.dir / NODE_DIR.format(node)


def node_checkpoint_dirs(checkpoints: CheckpointDir) -> list[Path]:
    if not checkpoints.dir.is_dir():
        return []
    return sorted(p for p in checkpoints.dir.glob("node-*") if p.is_dir())


def trained_mask(state: dict, num_utts: int) -> np.ndarray:
    sampler = state["sampler"]
    saved = int(sampler.get("num_utts", num_utts))
    if saved != num_utts:
        raise InputError(
            f"checkpoint of step {state['step']}: taken with {saved} training utterances, "
            f"the training set now has {num_utts}; "
            "the data changed under the experiment: use a new exp_name"
        )
    if "trained" not in sampler:
        raise InputError(
            f"checkpoint of step {state['step']}: saved by an older version without the epoch's progress; "
            "resume it with the same number of learners"
        )
    return unpack_mask(sampler["trained"], num_utts)


def progress_key(state: dict, num_utts: int) -> tuple[int, int]:
    """How far a checkpoint got: (completed epochs, utterances of the current epoch trained)."""
    return int(state["progress"]["epoch"]), int(trained_mask(state, num_utts).sum())


def find_start(
    checkpoints: CheckpointDir, ctx: DistributedContext, current: RunLayout, num_utts: int, checkpoint_every: int = 0
) -> Start:
    """The same decision on every learner (learner 0 makes it); each then loads its state.
    `checkpoint_every`: train.checkpoint_every_steps (0: at epoch ends only), which says whether
    a log without any checkpoint is of a run stopped before its first one was due."""
    decision = ("error", "")
    if ctx.is_writer:
        try:
            decision = _decide(checkpoints, current, num_utts, checkpoint_every)
        except InputError as err:
            decision = ("error", str(err))
    kind, source = ctx.broadcast_object(decision)
    if kind == "error":
        raise InputError(source)
    if kind == "fresh":
        return Start("fresh")
    if kind == "own":
        return _own_start(checkpoints, ctx, current, num_utts)
    state = load_checkpoint(Path(source), map_location="cpu")
    if kind == "exact":
        return Start("exact", state, None, source)
    return Start("replan", state, trained_mask(state, num_utts), source)


def _decide(checkpoints: CheckpointDir, current: RunLayout, num_utts: int, checkpoint_every: int) -> tuple[str, str]:
    try:
        global_state = checkpoints.load_newest(map_location="cpu")
        unreadable = ""
    except InputError as err:  # every periodic checkpoint unreadable
        global_state, unreadable = None, str(err)
    nodes, missing, sums = newest_node_states(checkpoints, num_utts)
    if nodes:
        behind = global_state is not None and progress_key(global_state, num_utts)
        if not behind or _node_progress(nodes, num_utts) >= behind:
            if not missing and current.decentralized and RunLayout.from_state(nodes[0]) == current:
                _cut_records_to_nodes(checkpoints, nodes)
                return "own", ""
            if not behind or _node_progress(nodes, num_utts) > behind:
                global_state = merge_nodes(checkpoints, nodes, sums, num_utts)
            # else: the nodes stand at the epoch end whose average is the newest step-*.pt
    if global_state is None:
        global_state, path = _last_resort(checkpoints, unreadable, checkpoint_every)
    else:
        path = str(checkpoints.dir / f"step-{global_state['step']:09d}.pt")
    _remove_node_dirs(
        checkpoints, "superseded by " + (f"step {global_state['step']}" if global_state else "a fresh start")
    )
    _cut_records_to_state(checkpoints, global_state)
    if global_state is None:
        return "fresh", ""
    same = RunLayout.from_state(global_state) == current and not current.decentralized
    return ("exact" if same else "replan"), path


def _cut_records_to_nodes(checkpoints: CheckpointDir, nodes: list[dict]) -> None:
    """Each node's learners' records (train.record_utterances) up to the node's own step."""
    steps = [int(s["progress"]["step"]) for s in nodes]
    cut_records(
        checkpoints.dir.parent, int(nodes[0]["progress"]["epoch"]), _by_learner(steps, RunLayout.from_state(nodes[0]))
    )


def _cut_records_to_state(checkpoints: CheckpointDir, state: dict | None) -> None:
    """The records up to what one checkpoint holds: its step (one learner, SSGD), the steps of
    the nodes it merged, or nothing of its epoch (a decentralized epoch end)."""
    if state is None:
        cut_records(checkpoints.dir.parent, 0, {})
        return
    layout, epoch = RunLayout.from_state(state), int(state["progress"]["epoch"])
    if not layout.decentralized:
        cut_records(checkpoints.dir.parent, epoch, {}, default=int(state["progress"]["step"]))
        return
    cut_records(checkpoints.dir.parent, epoch, _by_learner(state["distributed"].get("node_steps", []), layout))


def _by_learner(node_steps: list[int], layout: RunLayout) -> dict[int, int]:
    per = layout.learners_per_node
    return {node * per + i: step for node, step in enumerate(node_steps) for i in range(per)}


def _last_resort(checkpoints: CheckpointDir, unreadable: str, checkpoint_every: int) -> tuple[dict | None, str]:
    """No usable periodic checkpoint: go on from best.pt where it is readable; start afresh
    where the experiment has no history, or only the log of a run stopped before its first
    checkpoint was due (its steps are trained again, as a resume trains again the steps after
    its checkpoint); otherwise refuse, naming the way forward."""
    exp_dir = checkpoints.dir.parent
    if checkpoints.best.is_file():
        try:
            state = load_checkpoint(checkpoints.best, map_location="cpu")
            reason = unreadable or f"{checkpoints.dir}: no periodic checkpoint"
            log.warning(
                "%s; going on from %s (end of epoch %d): the steps after it are trained again",
                reason,
                checkpoints.best,
                state["progress"]["epoch"],
            )
            return state, str(checkpoints.best)
        except InputError as err:
            unreadable = f"{unreadable}; {err}" if unreadable else str(err)
    history = [name for name in ("train_log.csv", "checkpoints") if _has_content(exp_dir / name)]
    if history == ["train_log.csv"] and not unreadable:
        logged = _stopped_before_first_checkpoint(exp_dir, checkpoint_every)
        if logged:
            log.warning(
                "%s: the earlier run stopped before its first checkpoint (%d steps logged, "
                "train.checkpoint_every_steps=%d); training starts afresh and trains them again",
                exp_dir,
                logged,
                checkpoint_every,
            )
            return None, ""
    if history:
        raise InputError(
            f"{exp_dir}: an earlier run left {' and '.join(history)} but no checkpoint to go on from"
            f"{' (' + unreadable + ')' if unreadable else ''}. Pass train.restart=true to move its outputs to "
            f"{exp_dir / 'previous'}/<N>/ and start afresh, or use a new exp_name"
        )
    return None, ""


def _stopped_before_first_checkpoint(exp_dir: Path, checkpoint_every: int) -> int:
    """The last step the log holds if no checkpoint was due by then (no epoch end logged, fewer
    steps than train.checkpoint_every_steps), else 0: then checkpoints were lost, not never made."""
    rows = TrainLog(exp_dir).rows
    if not rows or any(not math.isnan(row.dev_loss) for row in rows):
        return 0
    last = max(row.step for row in rows)
    return last if checkpoint_every <= 0 or last < checkpoint_every else 0


def _has_content(path: Path) -> bool:
    if path.is_dir():
        return any(path.rglob("*.pt"))
    return path.is_file() and len(path.read_text().splitlines()) > 1  # a header and rows


def newest_node_states(checkpoints: CheckpointDir, num_utts: int) -> tuple[list[dict], list[int], "NodeStates"]:
    """Every node's newest state without its weights and moments, in node order; the nodes of
    their layout that saved none (killed before their first checkpoint); and the weights' and
    moments' sums over the nodes read. ([], [], the sums) when the states are not of one layout
    and one epoch (with a warning saying what is set aside)."""
    dirs = node_checkpoint_dirs(checkpoints)
    states, sums = [], NodeStates()
    for directory in dirs:  # one node's whole state in memory at a time (64 nodes: 64 models)
        state = CheckpointDir(directory, checkpoints.keep).load_newest(map_location="cpu")
        if state:
            states.append(sums.fold(state))
        del state
    if not states:
        if dirs:
            log.warning("%s: no node checkpoint in %s", checkpoints.dir, ", ".join(d.name for d in dirs))
        return [], [], sums
    layouts = {RunLayout.from_state(s) for s in states}
    epochs = {int(s["progress"]["epoch"]) for s in states}
    nodes = sorted(int(s["layout"]["node"]) for s in states)
    layout = next(iter(layouts))
    if len(layouts) != 1 or len(epochs) != 1 or not set(nodes) <= set(range(layout.num_nodes)):
        log.warning(
            "%s: the node checkpoints are not one consistent set (layouts %s, epochs %s, nodes %s); "
            "going on from the last epoch end instead",
            checkpoints.dir,
            sorted(map(str, layouts)),
            sorted(epochs),
            nodes,
        )
        return [], [], sums
    missing = sorted(set(range(layout.num_nodes)) - set(nodes))
    if missing:
        log.warning(
            "%s: node%s %s ha%s no checkpoint (stopped before %s first); the other nodes' checkpoints are "
            "merged, and the steps of this epoch the node%s took before the stop are trained again",
            checkpoints.dir,
            "s" if len(missing) > 1 else "",
            ", ".join(map(str, missing)),
            "ve" if len(missing) > 1 else "s",
            "their" if len(missing) > 1 else "its",
            "s" if len(missing) > 1 else "",
        )
    return sorted(states, key=lambda s: int(s["layout"]["node"])), missing, sums


def _node_progress(nodes: list[dict], num_utts: int) -> tuple[int, int]:
    union = np.logical_or.reduce([trained_mask(s, num_utts) for s in nodes])
    return int(nodes[0]["progress"]["epoch"]), int(union.sum())


class NodeStates:
    """The nodes' weights and optimizer moments as running float64 sums, so that merging N
    nodes holds one node's state and the sums, not N states. `fold(state)` adds a state's
    tensors and returns the state without them (what deciding where to start needs)."""

    def __init__(self):
        self.count = 0
        self.model: dict[str, tuple] = {}  # name -> (sum, dtype)
        self.moments: dict[tuple, tuple] = {}  # (param, key) -> (sum, dtype)

    def fold(self, state: dict) -> dict:
        self.add(state)
        return dict(state, model=None, updater=_without_tensors(state["updater"]))

    def add(self, state: dict) -> None:
        self.count += 1
        for key, tensor in state["model"].items():
            self.model[key] = _add(self.model.get(key), tensor)
        for param, entry in state["updater"]["optimizer"]["state"].items():
            for key, value in entry.items():
                if _is_moment(value):
                    self.moments[(param, key)] = _add(self.moments.get((param, key)), value)

    def mean_model(self) -> dict[str, torch.Tensor]:
        return {key: _divided(tensor, self.count) for key, tensor in self.model.items()}

    def mean_updater(self, first: dict) -> dict:
        """`first`'s updater state (counters, settings) with the mean moments put back."""
        merged = dict(first)
        optimizer = dict(first["optimizer"])
        optimizer["state"] = {
            param: {
                key: _divided(self.moments[(param, key)], self.count) if (param, key) in self.moments else value
                for key, value in entry.items()
            }
            for param, entry in first["optimizer"]["state"].items()
        }
        merged["optimizer"] = optimizer
        return merged


def _is_moment(value) -> bool:
    return torch.is_tensor(value) and value.dim() > 0


def _add(total: tuple | None, tensor: torch.Tensor) -> tuple:
    """(float64 sum, dtype) of floating tensors; a non-floating one (a counter) is the first's."""
    if total is None:
        return (tensor.to(torch.float64, copy=True) if tensor.is_floating_point() else tensor), tensor.dtype
    return _sum(total[0], tensor), total[1]


def _sum(total: torch.Tensor, tensor: torch.Tensor) -> torch.Tensor:
    return total.add_(tensor.double()) if total.is_floating_point() else total


def _divided(total: tuple, count: int) -> torch.Tensor:
    tensor, dtype = total
    return (tensor / count).to(dtype) if tensor.is_floating_point() else tensor


def _without_tensors(updater: dict) -> dict:
    """The updater state with its moments left out (kept: step counters and settings)."""
    optimizer = dict(updater["optimizer"])
    optimizer["state"] = {
        param: {key: (None if _is_moment(value) else value) for key, value in entry.items()}
        for param, entry in updater["optimizer"]["state"].items()
    }
    return dict(updater, optimizer=optimizer)


def merge_nodes(checkpoints: CheckpointDir, nodes: list[dict], sums: "NodeStates", num_utts: int) -> dict:
    """One checkpoint from the nodes' states (their tensors folded into `sums`): the mean of their weights
    and optimizer moments, what any of them trained this epoch, the first node's counters (node
    0's when it saved: learner 0 writes the training log). Nodes that saved nothing count as
    having taken no step of the epoch (node_steps -1), so their learners' records of it are cut."""
    merged = dict(nodes[0])
    merged["model"] = sums.mean_model()
    merged["updater"] = sums.mean_updater(nodes[0]["updater"])
    trained = np.logical_or.reduce([trained_mask(s, num_utts) for s in nodes])
    merged["sampler"] = dict(nodes[0]["sampler"], trained=pack_mask(trained), done=pack_mask(trained), batches_done=0)
    merged["progress"] = dict(
        nodes[0]["progress"], batches_done=0, elapsed_s=max(n["progress"]["elapsed_s"] for n in nodes)
    )
    merged["layout"] = {k: v for k, v in nodes[0]["layout"].items() if k != "node"}
    num_nodes = RunLayout.from_state(nodes[0]).num_nodes
    node_steps = [-1] * num_nodes
    for node in nodes:
        node_steps[int(node["layout"]["node"])] = int(node["progress"]["step"])
    merged["distributed"] = dict(nodes[0]["distributed"], merged_from_nodes=len(nodes), node_steps=node_steps)
    path = checkpoints.save(merged)
    log.info(
        "merged the %s checkpoints (epoch %d, %d of %d utterances of it trained) into %s",
        f"{len(nodes)} nodes'" if len(nodes) == num_nodes else f"{len(nodes)} of the {num_nodes} nodes'",
        merged["progress"]["epoch"] + 1,
        int(trained.sum()),
        num_utts,
        path,
    )
    return merged


def _remove_node_dirs(checkpoints: CheckpointDir, why: str) -> None:
    for directory in node_checkpoint_dirs(checkpoints):
        log.warning("%s: node checkpoints %s; removing them", directory, why)
        shutil.rmtree(directory, ignore_errors=True)


def _own_start(checkpoints: CheckpointDir, ctx: DistributedContext, current: RunLayout, num_utts: int) -> Start:
    node = ctx.rank // current.learners_per_node
    directory = node_dir(checkpoints, node)
    state = CheckpointDir(directory, checkpoints.keep).load_newest(map_location="cpu")
    if state is None:
        raise InputError(f"{directory}: node checkpoint vanished while resuming")
    masks = ctx.gather_objects(state["sampler"]["trained"])
    done = np.logical_or.reduce([unpack_mask(m, num_utts) for m in masks])
    return Start("own", state, done, str(directory))
