"""Where a run starts from what an earlier run saved: exact, own (per node), replan, merged
node checkpoints (elastic), fresh; and what is set aside."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch

from asr.distributed.context import DistributedContext
from asr.models import checkpoint as checkpoint_module
from asr.models.checkpoint import CHECKPOINT_FORMAT, CheckpointDir, load_checkpoint, save_checkpoint
from asr.train.data import pack_mask, unpack_mask
from asr.train.loop import Progress
from asr.train.record import read_record, record_path
from asr.train.resume import RunLayout, find_start, newest_node_states, node_dir
from asr.utils.errors import InputError

UTTS = 20
SINGLE = RunLayout(False, 1, 1)
ADPSGD2 = RunLayout(True, 2, 1)
ADPSGD3 = RunLayout(True, 3, 1)


def mask(*indices: int) -> np.ndarray:
    m = np.zeros(UTTS, dtype=bool)
    m[list(indices)] = True
    return m


def state(
    step: int,
    epoch: int,
    trained: np.ndarray,
    layout: RunLayout,
    weight: float,
    node: int | None = None,
    moment: float = 0.0,
) -> dict:
    layout_entry = layout.as_dict() | ({"node": node} if node is not None else {})
    return {
        "format": CHECKPOINT_FORMAT,
        "model": {"w": torch.full((3,), weight)},
        "model_info": {},
        "updater": {
            "optimizer": {
                "state": {0: {"step": torch.tensor(float(step)), "exp_avg": torch.full((3,), moment)}},
                "param_groups": [],
            },
            "schedule": {"steps": step, "epochs": epoch},
        },
        "sampler": {
            "epoch": epoch,
            "batches_done": 0,
            "num_utts": UTTS,
            "done": pack_mask(mask()),
            "trained": pack_mask(trained),
        },
        "rng": {},
        "step": step,
        "epoch": epoch,
        "progress": {"epoch": epoch, "step": step, "elapsed_s": float(step), "batches_done": 3},
        "config": {},
        "layout": layout_entry,
        "distributed": {"world_size": layout.world_size},
    }


@pytest.fixture
def checkpoints(tmp_path) -> CheckpointDir:
    return CheckpointDir(tmp_path / "checkpoints", keep=3)


def save_nodes(
    checkpoints: CheckpointDir, layout: RunLayout, epoch: int, trained: list[np.ndarray], weights: list[float]
) -> None:
    for node, (t, w) in enumerate(zip(trained, weights)):
        save_checkpoint(
            node_dir(checkpoints, node) / f"step-{10 + node:09d}.pt",
            state(10 + node, epoch, t, layout, w, node=node, moment=w / 10),
        )


def test_nothing_saved_is_a_fresh_start(checkpoints):
    assert find_start(checkpoints, DistributedContext(), SINGLE, UTTS).kind == "fresh"


def test_same_layout_resumes_exactly_another_replans(checkpoints):
    checkpoints.save(state(7, 1, mask(0, 1, 2), SINGLE, 1.0))
    start = find_start(checkpoints, DistributedContext(), SINGLE, UTTS)
    assert start.kind == "exact" and start.state["step"] == 7
    start = find_start(checkpoints, DistributedContext(), ADPSGD2, UTTS)
    assert start.kind == "replan" and start.done.tolist() == mask(0, 1, 2).tolist()


def test_decentralized_nodes_resume_their_own_state(checkpoints):
    checkpoints.save(state(5, 1, mask(), ADPSGD2, 0.5))  # the last epoch end's average
    save_nodes(checkpoints, ADPSGD2, 1, [mask(0, 1), mask(5)], [1.0, 3.0])
    start = find_start(checkpoints, DistributedContext(), ADPSGD2, UTTS)
    assert start.kind == "own" and start.state["layout"]["node"] == 0 and float(start.state["model"]["w"][0]) == 1.0
    # With one process the union of what the nodes trained is what this learner gathers: its own.
    assert start.done.tolist() == mask(0, 1).tolist()


def test_another_layout_merges_the_nodes_into_one_checkpoint(checkpoints, caplog):
    caplog.set_level("INFO")
    save_nodes(checkpoints, ADPSGD2, 1, [mask(0, 1), mask(5)], [1.0, 3.0])
    start = find_start(checkpoints, DistributedContext(), ADPSGD3, UTTS)
    assert start.kind == "replan" and start.done.tolist() == mask(0, 1, 5).tolist()
    merged = load_checkpoint(start.source)
    assert torch.equal(merged["model"]["w"], torch.full((3,), 2.0))  # the nodes' mean
    moments = merged["updater"]["optimizer"]["state"][0]
    assert (
        torch.allclose(moments["exp_avg"], torch.full((3,), 0.2)) and float(moments["step"]) == 10.0
    )  # counters: node 0's
    assert unpack_mask(merged["sampler"]["trained"], UTTS).tolist() == mask(0, 1, 5).tolist()
    assert not list(checkpoints.dir.glob("node-*"))  # merged, then removed
    assert "merged the 2 nodes' checkpoints (epoch 2, 3 of 20 utterances of it trained)" in caplog.text
    # One learner goes on from the merged checkpoint the same way.
    assert find_start(checkpoints, DistributedContext(), SINGLE, UTTS).kind == "replan"


def test_merging_many_nodes_holds_one_nodes_state_at_a_time(checkpoints, monkeypatch):
    """64 learners' node states do not fit in learner 0's memory together: they are summed as
    they are read. Counted with the states' weight tensors alive when the next one is read."""
    nodes = 6
    save_nodes(
        checkpoints, RunLayout(True, nodes, 1), 1, [mask(n) for n in range(nodes)], [float(n) for n in range(nodes)]
    )
    alive, peak = set(), []
    read = checkpoint_module.load_checkpoint

    def counting_read(path, map_location="cpu"):
        gc.collect()
        peak.append(len(alive))
        state = read(path, map_location)
        weakref.finalize(state["model"]["w"], alive.discard, str(path))
        alive.add(str(path))
        return state

    monkeypatch.setattr(checkpoint_module, "load_checkpoint", counting_read)
    summaries, missing, sums = newest_node_states(checkpoints, UTTS)
    assert len(peak) == nodes and max(peak) == 0  # none still held when the next is read
    assert len(summaries) == nodes and not missing and sums.count == nodes
    assert summaries[0]["model"] is None and summaries[0]["updater"]["optimizer"]["state"][0]["exp_avg"] is None
    start = find_start(checkpoints, DistributedContext(), ADPSGD3, UTTS)
    merged = load_checkpoint(start.source)
    assert torch.equal(merged["model"]["w"], torch.full((3,), 2.5))  # mean of 0..5
    assert torch.allclose(merged["updater"]["optimizer"]["state"][0]["exp_avg"], torch.full((3,), 0.25))
    assert start.done.tolist() == mask(*range(nodes)).tolist()


def test_node_checkpoints_older_than_the_last_epoch_end_are_set_aside(checkpoints, caplog):
    save_nodes(checkpoints, ADPSGD2, 1, [mask(0, 1), mask(5)], [1.0, 3.0])
    checkpoints.save(state(30, 2, mask(), SINGLE, 9.0))  # a later run went further
    start = find_start(checkpoints, DistributedContext(), ADPSGD2, UTTS)
    assert start.kind == "replan" and start.state["step"] == 30
    assert not list(checkpoints.dir.glob("node-*")) and "superseded by step 30" in caplog.text


def test_an_incomplete_node_set_is_merged_when_ahead_of_the_epoch_end(checkpoints, caplog):
    """Node 1 was killed before its first checkpoint after the last merge: node 0's progress
    past the epoch end is kept, node 1's steps are trained again."""
    caplog.set_level("INFO")
    checkpoints.save(state(5, 1, mask(), ADPSGD2, 0.5))
    save_nodes(checkpoints, ADPSGD2, 1, [mask(0, 1)], [1.0])  # node 1 never saved
    start = find_start(checkpoints, DistributedContext(), ADPSGD2, UTTS)
    assert start.kind == "replan" and start.state["step"] == 10 and start.done.tolist() == mask(0, 1).tolist()
    assert start.state["distributed"]["node_steps"] == [10, -1]
    assert "node 1 has no checkpoint" in caplog.text and "merged the 1 of the 2 nodes' checkpoints" in caplog.text


def test_an_incomplete_node_set_in_the_first_epoch_is_merged_not_refused(checkpoints, caplog):
    """Node 0 killed before its first checkpoint, node 1 after its: the restart goes on from node 1's
    state (it used to refuse: no checkpoint to go on from), and cuts node 0's records of the epoch."""
    save_checkpoint(node_dir(checkpoints, 1) / "step-000000004.pt", state(4, 0, mask(7, 8), ADPSGD2, 3.0, node=1))
    for rank, text in {0: "1 1 a\n1 2 b\n", 1: "1 3 c\n1 4 d\n1 5 e\n"}.items():
        record_path(checkpoints.dir.parent, rank).parent.mkdir(parents=True, exist_ok=True)
        record_path(checkpoints.dir.parent, rank).write_text(text)
    start = find_start(checkpoints, DistributedContext(), ADPSGD2, UTTS)
    assert start.kind == "replan" and start.done.tolist() == mask(7, 8).tolist()
    assert torch.equal(start.state["model"]["w"], torch.full((3,), 3.0))
    assert start.state["distributed"]["node_steps"] == [-1, 4]
    assert "node 0 has no checkpoint" in caplog.text
    assert not list(checkpoints.dir.glob("node-*"))  # merged, then removed
    kept = [[u for _, _, utts in read_record(record_path(checkpoints.dir.parent, r)) for u in utts] for r in range(2)]
    assert kept == [[], ["c", "d"]]


def test_node_checkpoints_of_mixed_epochs_fall_back_to_the_epoch_end(checkpoints, caplog):
    checkpoints.save(state(5, 1, mask(), ADPSGD2, 0.5))
    save_nodes(checkpoints, ADPSGD2, 1, [mask(0, 1), mask(5)], [1.0, 3.0])
    save_checkpoint(node_dir(checkpoints, 1) / "step-000000020.pt", state(20, 2, mask(5), ADPSGD2, 3.0, node=1))
    start = find_start(checkpoints, DistributedContext(), ADPSGD2, UTTS)
    assert start.kind == "replan" and start.state["step"] == 5
    assert "not one consistent set" in caplog.text


# Learners' records (train.record_utterances): epoch 1 done; epoch 2 (0-based 1) in progress.
RECORDS = {0: "1 3 a\n2 9 b\n2 10 c\n2 11 d\n", 1: "1 4 e\n2 11 f\n2 12 g\n2 13 h"}  # learner 1 killed mid-line


def write_records(checkpoints: CheckpointDir) -> None:
    for rank, text in RECORDS.items():
        record_path(checkpoints.dir.parent, rank).parent.mkdir(parents=True, exist_ok=True)
        record_path(checkpoints.dir.parent, rank).write_text(text)


def recorded(checkpoints: CheckpointDir) -> dict[int, list[str]]:
    return {
        rank: [u for _, _, utts in read_record(record_path(checkpoints.dir.parent, rank)) for u in utts]
        for rank in RECORDS
    }


def test_records_keep_the_steps_of_each_nodes_own_checkpoint(checkpoints):
    save_nodes(checkpoints, ADPSGD2, 1, [mask(0, 1), mask(5)], [1.0, 3.0])  # nodes at steps 10 and 11
    write_records(checkpoints)
    assert find_start(checkpoints, DistributedContext(), ADPSGD2, UTTS).kind == "own"
    assert recorded(checkpoints) == {0: ["a", "b", "c"], 1: ["e", "f"]}
    write_records(checkpoints)
    assert find_start(checkpoints, DistributedContext(), ADPSGD3, UTTS).kind == "replan"  # merged: the nodes' steps
    assert recorded(checkpoints) == {0: ["a", "b", "c"], 1: ["e", "f"]}


def test_records_of_a_nodes_learners_keep_their_nodes_steps(checkpoints):
    hadpsgd = RunLayout(True, 4, 2)  # 2 nodes x 2 learners, nodes at steps 10 and 11
    save_nodes(checkpoints, hadpsgd, 1, [mask(0, 1), mask(5)], [1.0, 3.0])
    lines = "2 10 a\n2 11 b\n2 12 c\n"
    for rank in range(4):
        record_path(checkpoints.dir.parent, rank).parent.mkdir(parents=True, exist_ok=True)
        record_path(checkpoints.dir.parent, rank).write_text(lines)
    assert find_start(checkpoints, DistributedContext(), hadpsgd, UTTS).kind == "own"
    kept = [[u for _, _, utts in read_record(record_path(checkpoints.dir.parent, r)) for u in utts] for r in range(4)]
    assert kept == [["a"], ["a"], ["a", "b"], ["a", "b"]]


@pytest.mark.parametrize(
    "saved,expected",
    [
        (state(10, 1, mask(0), SINGLE, 1.0), {0: ["a", "b", "c"], 1: ["e"]}),  # one model: its step
        (state(5, 1, mask(), ADPSGD2, 0.5), {0: ["a"], 1: ["e"]}),  # a decentralized epoch end: none of epoch 2
    ],
)
def test_records_keep_the_steps_of_one_checkpoint(checkpoints, saved, expected):
    checkpoints.save(saved)
    write_records(checkpoints)
    find_start(checkpoints, DistributedContext(), SINGLE, UTTS)
    assert recorded(checkpoints) == expected


def test_a_fresh_start_empties_the_records(checkpoints):
    write_records(checkpoints)
    assert find_start(checkpoints, DistributedContext(), SINGLE, UTTS).kind == "fresh"
    assert recorded(checkpoints) == {0: [], 1: []}


def test_a_changed_training_set_is_refused(checkpoints):
    checkpoints.save(state(7, 1, mask(0), SINGLE, 1.0))
    with pytest.raises(InputError, match="taken with 20 training utterances, the training set now has 19"):
        find_start(checkpoints, DistributedContext(), ADPSGD2, UTTS - 1)


def test_progress_of_an_earlier_toolkits_checkpoint_drops_the_fields_it_no_longer_keeps(caplog):
    saved = {"step": 1100, "epoch": 1, "batches_done": 285, "bad_batches": 0}
    with caplog.at_level("WARNING"):
        progress = Progress.from_checkpoint(saved, "exp/x/checkpoints/step-000001100.pt")
    assert (progress.step, progress.epoch, progress.batches_done, progress.bad_utterances) == (1100, 1, 285, 0)
    assert (
        "step-000001100.pt: written by an earlier toolkit; its progress fields bad_batches are no longer kept (ignored)"
        in caplog.text
    )
