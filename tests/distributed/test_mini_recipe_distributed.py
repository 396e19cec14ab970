"""The mini recipe under torchrun on the tiny synthetic corpus: SSGD with 2 processes, H-ADPSGD
with 2 and 4 (as 2 nodes x 2), ADPSGD with 4 on the randomized ring with delay-by-one and node
checkpoints every 3 steps. SSGD equals one learner with the union batch; H-ADPSGD with one node
equals SSGD bit for bit; ADPSGD's learners stay close. (A torchrun job of SSGD with 4 processes
ran the same code as the one with 2, its gradients all-reduced over 4 learners instead of 2; jobs
of 4 learners still run under ADPSGD and H-ADPSGD, whose epoch ends average over all 4. ADPSGD
with 4 learners on the fixed ring and without delay-by-one is not run here a second time: the
trainer's side of ADPSGD is the same on every topology and is run here, undelayed, under
H-ADPSGD (hadpsgd4) and, with 2 learners on the fixed ring, in test_chunked_torchrun.py; the
fixed ring's pairs of 4 and 16 real learners are test_learner_processes.py's.)"""

from __future__ import annotations

import json
import re

import pytest
import torch

from asr.config import load_config
from asr.train import loop
from tests.recipes.conftest import TINY, Recipe

pytestmark = pytest.mark.slow

# 64 training utterances (one more held out than TINY's 20), two per learner and step: 16
# (2 learners) or 8 (4 learners) steps per epoch, every global batch full. No dropout, so
# runs can be compared exactly; in fp32, since bf16 rounding depends on how a batch is split.
TINY = [*TINY, "data.dev_utts=21", "train.precision=fp32"]
PER_LEARNER = ["train.max_utts=2", "train.max_frames=20000", "model.dropout=0", "train.plot=false"]
RUNS = {
    "ssgd2": (2, ["distributed=ssgd"]),
    "hadpsgd2": (2, ["distributed=hadpsgd"]),  # one node of 2: SSGD inside it, nobody to exchange with
    "hadpsgd4": (4, ["distributed=hadpsgd", "distributed.learners_per_node=2"]),  # 2 nodes x 2
    "adpsgd4v": (
        4,
        [
            "distributed=adpsgd",
            "distributed.topology=random_ring",
            "distributed.delay_by_one=true",
            "train.checkpoint_every_steps=3",
        ],
    ),
}


def stage_number(recipe: Recipe, name: str) -> int:
    """The recipe's number for a stage, read from its run.sh (stages get renumbered); tune,
    decode and score are the three stages from `decode_stages N` on (scripts/recipe.sh)."""
    script = (recipe.dir / "run.sh").read_text()
    if name in ("tune", "decode", "score"):
        return int(re.search(r"decode_stages (\d+)", script).group(1)) + ("tune", "decode", "score").index(name)
    return int(re.search(rf"run_stage (\d+) {name}\b", script).group(1))


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> Recipe:
    r = Recipe(tmp_path_factory.mktemp("mini_dist"), "mini")
    # Up to the tokenizer: the LM and the lang dir (stage 4) serve beam_lm and WFST decoding,
    # and these runs decode greedily.
    r.run("--exp", "prep", "--stop-stage", str(stage_number(r, "tokenizer")), *TINY)
    return r


@pytest.fixture(scope="module")
def runs(recipe) -> dict:
    """Every run's train stage; the headline one (H-ADPSGD, 2 nodes x 2) is also decoded and
    scored, the stages after training being the same for every algorithm."""
    train, score = stage_number(recipe, "train"), stage_number(recipe, "score")
    out = {}
    for name, (nproc, overrides) in RUNS.items():
        stop = score if name == "hadpsgd4" else train
        proc = recipe.run(
            "--exp",
            name,
            "--stage",
            str(train),
            "--stop-stage",
            str(stop),
            "--nproc",
            str(nproc),
            "--decode",
            "greedy",
            "--score",
            "jiwer",
            *TINY,
            *PER_LEARNER,
            *overrides,
        )
        out[name] = proc.stderr + proc.stdout
    return out


def last(recipe: Recipe, exp: str) -> dict:
    return torch.load(recipe.dir / "exp" / exp / "checkpoints" / "last.pt", weights_only=True)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_algorithm_trains_under_torchrun(recipe, runs, name):
    nproc, _ = RUNS[name]
    state = last(recipe, name)
    assert state["epoch"] == 2 and state["distributed"]["world_size"] == nproc
    assert state["distributed"]["algorithm"] == re.match(r"\D+", name).group()
    assert f"torchrun --standalone --nproc-per-node {nproc} --max-restarts 0 -m asr.train" in runs[name]
    if name == "hadpsgd4":  # decoded and scored like any experiment
        assert (recipe.dir / "exp" / name / "decode_eval2000_greedy" / "wer.json").is_file()  # --decode greedy
    assert all(torch.isfinite(t).all() for t in state["model"].values())


@pytest.mark.parametrize("name,learners", [("ssgd2", 2)])
def test_ssgd_equals_one_learner_with_the_union_batch(recipe, runs, name, learners, monkeypatch):
    monkeypatch.chdir(recipe.dir)
    single = [
        *TINY,
        "train.max_utts=%d" % (2 * learners),
        "train.max_frames=%d" % (20000 * learners),
        "model.dropout=0",
        "exp_name=single%d" % learners,
    ]
    loop.train(load_config(single))
    expected = last(recipe, f"single{learners}")
    got = last(recipe, name)
    assert got["step"] == expected["step"]
    for key, tensor in expected["model"].items():
        torch.testing.assert_close(got["model"][key], tensor, rtol=1e-4, atol=1e-5)
    assert got["progress"]["dev_loss"] == pytest.approx(expected["progress"]["dev_loss"], rel=1e-4)


def test_hadpsgd_on_one_node_is_ssgd_bit_for_bit(recipe, runs):
    assert "one node of 2 learners: no exchanges (SSGD inside the node)" in runs["hadpsgd2"]
    ssgd, hadpsgd = last(recipe, "ssgd2"), last(recipe, "hadpsgd2")
    for key, tensor in ssgd["model"].items():
        assert torch.equal(hadpsgd["model"][key], tensor), key


@pytest.mark.parametrize("name,exchangers", [("hadpsgd4", [0, 1, 2, 3]), ("adpsgd4v", [0, 1, 2, 3])])
def test_decentralized_learners_exchange_every_step_and_stay_close(recipe, runs, name, exchangers):
    """Every learner exchanges (under H-ADPSGD each its half of the weights): an active one once
    per step of its own; the nodes' steps add up to the epochs' batches, which they claimed
    first come first served; the epoch ends average learners that drifted apart a little."""
    out = runs[name]
    counts = {
        int(r): int(n)
        for r, n in re.findall(r"\[rank(\d+) asr.distributed.adpsgd\] learner \d+: (\d+) ADPSGD weight exchanges", out)
    }
    assert sorted(counts) == exchangers, out[-3000:]
    timing = {
        r: json.loads((recipe.dir / "exp" / name / "timing" / f"learner-{r}.json").read_text()) for r in exchangers
    }
    actives = [r for r in exchangers if (r // (2 if name == "hadpsgd4" else 1)) % 2 == 0]
    for rank in actives:  # an active may train no batch at all: rank 0 evaluates while the others claim
        assert counts[rank] == timing[rank]["steps"]
    assert sum(counts[r] for r in actives) > 0
    per_node = 2 if name == "hadpsgd4" else 1
    node_steps = sum(timing[r]["steps"] for r in exchangers if r % per_node == 0)
    assert node_steps == 2 * 64 // (2 * per_node)  # two epochs of 64 utterances, 2 per learner
    assert sum(counts[r] for r in exchangers) == 2 * sum(counts[r] for r in actives)  # each exchange has two sides
    if name == "hadpsgd4":
        assert "2 nodes x 2 learners" in out
    spreads = [float(s) for s in re.findall(r"learners' spread before averaging ([0-9.e-]+)", out)]
    assert len(spreads) == 2 and all(0 < s < 0.05 for s in spreads), spreads  # one average per epoch end
    nodes = sorted(p.name for p in (recipe.dir / "exp" / name / "checkpoints").glob("node-*"))
    assert nodes == [f"node-{n:03d}" for n in range(len(exchangers) // per_node)]
