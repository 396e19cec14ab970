"""The mini recipe end to end on the tiny synthetic corpus: stages, their records, skipping (and
running again exactly the stages an edited input reaches), WER files, and kill-during-training
then resume."""

from __future__ import annotations

import csv
import re
import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch

from asr.kaldi.matrix import read_transform_ark
from tests.recipes.conftest import TINY, done_stages

pytestmark = pytest.mark.slow

# The stage numbers of every recipe (docs/recipes.md), mini's synthesis before them as -1.
STAGES = [
    "-1.synth",
    "0.prepare",
    "1.validate",
    "2.features",
    "3.tokenizer",
    "4.lm",
    "5.train",
    "6.tune",
    "7.decode",
    "8.score",
]


def numbered(marker: str) -> tuple[int, str]:
    number, name = marker.split(".", 1)
    return int(number), name


def test_stages_run_one_by_one_then_skip(mini_recipe):
    r = mini_recipe
    for name in STAGES:
        n, stage = numbered(name)
        proc = r.run("--exp", "smoke", "--stage", str(n), "--stop-stage", str(n), *TINY)
        assert f"stage {n} ({stage})" in proc.stderr
        assert (r.dir / "exp/smoke/.done" / f"{name}.record.json").is_file(), f"no record after stage {name}"

    # The Kaldi data dirs and features exist and agree.
    train_utts = (r.dir / "data/train/utt2spk").read_text().splitlines()
    feats = (r.dir / "feats/logmel40/train/feats.scp").read_text().splitlines()
    assert len(train_utts) == len(feats) > 20
    assert (r.dir / "feats/logmel40/train/feat_dim").read_text().strip() == "40"  # the demo's default

    # Training wrote its log, plot and a final checkpoint after 2 epochs.
    exp = r.dir / "exp/smoke"
    rows = list(csv.DictReader(open(exp / "train_log.csv")))
    assert rows and int(rows[-1]["epoch"]) == 2
    assert (exp / "loss.png").stat().st_size > 1000
    assert torch.load(exp / "checkpoints/last.pt", weights_only=True)["epoch"] == 2

    # Decoding and scoring: a hypothesis per utterance and the wer.json contract.
    ref = (r.dir / "data/eval2000/text").read_text().splitlines()
    hyp = (exp / "decode_eval2000/hyp.txt").read_text().splitlines()
    assert [h.split()[0] for h in hyp] == [x.split()[0] for x in ref]
    wer = json.loads((exp / "decode_eval2000/wer.json").read_text())
    assert set(wer) == {"swb", "callhome", "total"}
    for subset in wer.values():
        assert set(subset) >= {"wer", "sub", "del", "ins", "words", "sentences"}
        assert subset["wer"] == pytest.approx(
            100 * (subset["sub"] + subset["del"] + subset["ins"]) / subset["words"], abs=0.01
        )
    assert wer["total"]["words"] == wer["swb"]["words"] + wer["callhome"]["words"]
    assert (exp / "decode_eval2000/wer.md").read_text().startswith("|")

    # Beside the LM decode, greedy decoding is scored for comparison, in its own dir.
    for name in ("7.decode_greedy", "8.score_greedy"):
        assert (exp / ".done" / f"{name}.record.json").is_file(), name
    greedy = json.loads((exp / "decode_eval2000_greedy/wer.json").read_text())
    # The same references; SCTK counts a GLM alternative's words as the hypothesis matched them.
    assert greedy["total"]["words"] == pytest.approx(wer["total"]["words"], rel=0.01)
    assert (exp / "decode_eval2000_greedy/hyp.ctm").is_file() and (exp / "decode_eval2000_greedy/wer.md").is_file()

    # Each stage that ran left one line with its wall time; stages that skip add none.
    times = (exp / "stage_times.jsonl").read_text()
    ran = [json.loads(line) for line in times.splitlines()]
    assert [f"{t['stage']}.{t['name']}" for t in ran if t["name"] in dict(map(numbered, STAGES)).values()] == STAGES
    assert all(isinstance(t["seconds"], int) and t["seconds"] >= 0 for t in ran)

    # A second run of every stage skips them all and still prints the WER table.
    proc = r.run("--exp", "smoke", *TINY, timeout=120)
    assert (exp / "stage_times.jsonl").read_text() == times
    for n, stage in map(numbered, STAGES):
        assert f"stage {n} ({stage}): done already" in proc.stderr
    assert "greedy decoding (no LM)" in proc.stderr and "beam_lm decoding" in proc.stderr
    assert proc.stdout.count("| total |") == 2
    commands = (exp / "commands.log").read_text().splitlines()
    assert len(commands) == len(STAGES) + 1 and "--exp smoke" in commands[-1]

    # The README's "greedy decoding, for comparison" decodes greedy again, into its own dir:
    # the beam+LM result is left as it was.
    lm_dir = {p.name: p.read_bytes() for p in (exp / "decode_eval2000").iterdir() if p.is_file()}
    proc = r.run("--exp", "smoke", "--stage", "7", "--decode", "greedy", "--force", *TINY, timeout=300)
    assert "stage 7 (decode_greedy)" in proc.stderr and "stage 8 (score_greedy)" in proc.stderr
    assert {p.name: p.read_bytes() for p in (exp / "decode_eval2000").iterdir() if p.is_file()} == lm_dir
    assert json.loads((exp / "decode_eval2000_greedy/wer.json").read_text()) == greedy
    assert "greedy decoding (no LM)" in proc.stderr and "beam_lm decoding" not in proc.stderr


def test_an_edited_transcript_reruns_the_stages_that_read_it_and_not_the_features(mini_recipe):
    r = mini_recipe
    r.run("--exp", "smoke", "--stop-stage", "5", *TINY)  # done already after the test above
    text = r.dir / "data/train/text"
    lines = text.read_text().splitlines()
    first = lines[0].split()
    lines[0] = " ".join([*first, first[-1]])  # one word more in one transcript
    text.write_text("\n".join(lines) + "\n")

    proc = r.run("--exp", "smoke", "--stop-stage", "5", *TINY)
    for n, stage in ((1, "validate"), (3, "tokenizer"), (4, "lm"), (5, "train")):
        assert f"stage {n} ({stage}): done before, but an option or an input changed" in proc.stderr, proc.stderr
        assert f"stage {n} ({stage}): finished" in proc.stderr
    assert f"  input {text}" in proc.stderr  # the log names the file that changed
    # prepare names the corpus, not the data dir it wrote: the edit stays
    for n, stage in ((-1, "synth"), (0, "prepare"), (2, "features"), (4, "lang")):
        assert f"stage {n} ({stage}): done already" in proc.stderr, stage
    assert text.read_text().splitlines()[0] == lines[0]
    proc = r.run("--exp", "smoke", "--stop-stage", "5", *TINY)
    assert proc.stderr.count("done already") == 8  # synth .. train

    # The decoding stages name the checkpoint (and the tokenizer and the LM): they run again;
    # score names the hypotheses, and runs again when they came out different.
    hyp = r.dir / "exp/smoke/decode_eval2000/hyp.txt"
    before = hyp.read_text()
    proc = r.run("--exp", "smoke", *TINY)
    for n, stage in ((6, "tune"), (7, "decode"), (7, "decode_greedy")):
        assert f"stage {n} ({stage}): done before, but an option or an input changed" in proc.stderr, stage
    assert f"  input {r.dir}/exp/smoke/checkpoints/last.pt" in proc.stderr
    score = "done before, but an option or an input changed" if hyp.read_text() != before else "done already"
    assert f"stage 8 (score): {score}" in proc.stderr
    for n, stage in ((2, "features"), (5, "train")):
        assert f"stage {n} ({stage}): done already" in proc.stderr, stage


def _wait_for(predicate, timeout: float, what: str, proc, log) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"run.sh ended ({proc.returncode}) before {what}:\n{log.read_text()[-4000:]}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}:\n{log.read_text()[-4000:]}")


def _running_in_group(pgid: int) -> list[int]:
    """Pids of process group `pgid` that still run (zombies are over: they only wait to be reaped)."""
    running = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if int(group) == pgid and state not in ("Z", "X"):
            running.append(int(stat.parent.name))
    return running


def test_killed_training_resumes_from_last_checkpoint(mini_recipe, tmp_path):
    r = mini_recipe
    r.run("--exp", "kill", "--stop-stage", "4", *TINY)
    args = [
        "--exp",
        "kill",
        "--stage",
        "5",
        "--stop-stage",
        "5",
        *TINY,
        "train.epochs=6",
        "train.checkpoint_every_steps=3",
        "train.log_every_steps=1",
        "train.plot=false",  # the smoke test checks loss.png; here a figure an epoch in two runs
    ]
    ckpt_dir = r.dir / "exp/kill/checkpoints"
    log = tmp_path / "first.log"
    proc = r.start(*args, log=log)
    try:
        _wait_for(lambda: len(list(ckpt_dir.glob("step-*.pt"))) >= 2, 300, "two checkpoints", proc, log)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.time() + 60  # the user re-runs once the killed job is over, as a scheduler does
    while _running_in_group(proc.pid) and time.time() < deadline:
        time.sleep(0.1)
    assert not _running_in_group(proc.pid)
    assert not (r.dir / "exp/kill/.done/5.train.record.json").exists(), "a killed stage must not look finished"
    assert not (ckpt_dir / "last.pt").exists()
    saved = max(torch.load(p, weights_only=True)["step"] for p in ckpt_dir.glob("step-*.pt"))

    proc = r.run(*args)
    assert f"resumed from step {saved}" in proc.stderr, proc.stderr[-3000:]
    final = torch.load(ckpt_dir / "last.pt", weights_only=True)
    assert final["epoch"] == 6
    # The resumed run continued the same schedule: steps = 6 epochs of the same batches.
    per_epoch = final["step"] / 6
    assert per_epoch == int(per_epoch) and final["step"] > saved
    # One training row per step (log_every_steps=1) plus one dev-loss row per epoch end:
    # the rows written after the checkpoint by the killed run are not repeated.
    rows = list(csv.DictReader(open(r.dir / "exp/kill/train_log.csv")))
    train_steps = [int(row["step"]) for row in rows if row["train_loss"]]
    assert train_steps == list(range(1, final["step"] + 1))
    assert sum(1 for row in rows if row["dev_loss"]) == 6
    assert (r.dir / "exp/kill/.done/5.train.record.json").is_file()


def test_missing_corpus_fails_naming_the_path(mini_recipe):
    proc = mini_recipe.run(
        "--exp", "bad", "--stage", "0", "--stop-stage", "0", *TINY, "data.swbd_dir=/nonexistent/LDC97S62", check=False
    )
    assert proc.returncode != 0
    assert "/nonexistent/LDC97S62" in proc.stderr
    assert "stage 0 (prepare) failed" in proc.stderr
    assert not (mini_recipe.dir / "exp/bad/.done/0.prepare.record.json").exists()


def test_hybrid_ce_trains_on_the_synthesisers_phone_targets(mini_recipe):
    r = mini_recipe
    made = (r.dir / "data/.done/0.prepare.record.json").is_file()  # by an earlier test's experiment
    proc = r.run("--exp", "hybrid", "experiment=hybrid_ce", *TINY)
    # experiment= sets none of the data stages' groups (asr/utils/experiment_groups.py)
    assert not made or "stage 0 (prepare): done already by another experiment" in proc.stderr
    done = done_stages(r.dir / "exp/hybrid")
    assert "2.phone_ali" in done and "5.train" in done
    assert "6.tune" not in done and "the recipe ends here" in proc.stderr
    phones = (r.dir / "exp/hybrid/phone_ali/phones.txt").read_text().splitlines()
    train_log = (r.dir / "exp/hybrid/log/train.log").read_text()
    # every utterance has its targets, and the model has one output per phone
    assert re.search(r"data/train: kept (\d+) of \1 utterances", train_log), train_log[-2000:]
    assert f"counts of {len(phones)} pdfs" in train_log
    assert len(re.findall(r"dev frame accuracy 0\.\d+", train_log)) == 2  # one per epoch


# GMM systems small enough for the tiny corpus: fewer passes, Gaussians and leaves, one job; a
# narrower search than Kaldi's (beam 13, 7000 active states, lattice beam 6): the BLSTM's scores
# after 10 updates are nearly flat, so that search spreads over most of the graph every frame
# (eval2000 alone took 63 s of CPU, 6 s with the search below: the same one-word hypotheses).
TINY_GMM = [
    "gmm.num_iters=10",
    "gmm.realign_iters=[1,2,3,5,7,9]",
    "gmm.max_iter_inc=8",
    "gmm.total_gauss=200",
    "gmm.num_leaves=100",
    "gmm.nj=1",
    "decode.jobs=1",
    "decode.wfst_beam=8",
    "decode.max_active=500",
    "decode.lattice_beam=3",
]


def test_hybrid_trains_on_the_triphone_states_and_decodes_with_their_graph(mini_recipe):
    r = mini_recipe
    proc = r.run("--exp", "gmmhyb", "experiment=hybrid", *TINY, *TINY_GMM)
    done = done_stages(r.dir / "exp/gmmhyb")
    stages = (
        "4.lang",
        "4.mono",
        "4.mono_decode",
        "4.tri1",
        "4.tri1_dev",
        "4.tri1_decode",
        "4.tri3",
        "4.tri3_decode",
        "4.tri4",
        "4.tri4_dev",
        "4.tri4_decode",
        "4.tri4_score",
        "5.train",
        "6.tune",
        "8.score",
    )
    for stage in stages:
        assert stage in done, f"no record of {stage}:\n{proc.stderr[-3000:]}"
    tri1 = json.loads((r.dir / "exp/tri1/summary.json").read_text())
    train_log = (r.dir / "exp/gmmhyb/log/train.log").read_text()
    # the BLSTM has one output per triphone state, read from tri1's final.mdl
    assert f"-> {tri1['num_pdfs']} pdfs" in train_log, train_log[-2000:]
    tuning = json.loads((r.dir / "exp/gmmhyb/lm_tuning.json").read_text())
    assert len(tuning["grid"]) == 8 and tuning["best"] in tuning["grid"]  # conf/decode/wfst.yaml's scales
    assert (
        f"acoustic scale {tuning['best']['acoustic_scale']:g}: the best"
        in proc.stderr + (r.dir / "exp/gmmhyb/log/decode.log").read_text()
    )
    report = (r.dir / "exp/gmmhyb/report.md").read_text()
    for system in ("exp/mono", "exp/tri1", "exp/tri3", "exp/tri4", "exp/gmmhyb"):
        wer = json.loads((r.dir / system / "decode_eval2000/wer.json").read_text())
        assert wer["total"]["words"] > 0 and system.split("/")[1] in report
    # the LDA+MLLT system's matrix, the SAT system's transforms and alignment model, Kaldi's files;
    # its decoding adapted every eval speaker in a second pass
    assert (r.dir / "exp/tri3/final.mat").is_file() and not (r.dir / "exp/tri3/trans.ark").exists()
    for name in ("final.mat", "splice_opts", "trans.ark", "final.alimdl"):
        assert (r.dir / "exp/tri4" / name).is_file(), name
    speakers = {line.split()[0] for line in (r.dir / "data/eval2000/spk2utt").read_text().splitlines()}
    assert set(read_transform_ark(r.dir / "exp/tri4/decode_eval2000/trans.ark")) == speakers
    assert (r.dir / "exp/tri4_ali_dev/trans.ark").is_file()
    hyps = (r.dir / "exp/gmmhyb/decode_eval2000/hyp.txt").read_text().splitlines()
    assert sum(len(line.split()) > 1 for line in hyps) > len(hyps) / 2  # words decoded, not empty lines

    # An LM option changed: the LM and the GMM decodes run again (and the scores after them), the
    # GMM systems do not: their records name what they read, and that is not the LM.
    again = ("--exp", "gmmhyb", "--stage", "4", "--stop-stage", "4", "experiment=hybrid", *TINY, *TINY_GMM)
    proc = r.run(*again, "lm.prune=[0,0,1]")
    for stage in ("lm", "mono_decode", "mono_score", "tri1_decode", "tri1_score", "tri4_decode", "tri4_score"):
        assert f"stage 4 ({stage}): done before, but an option or an input changed" in proc.stderr, stage
    for stage in ("lang", "mono", "tri1", "tri1_dev", "tri3", "tri4", "tri4_dev"):
        assert f"stage 4 ({stage}): done already" in proc.stderr, stage


def test_hybrid_sat_trains_on_the_sat_system_and_its_features(mini_recipe):
    """experiment=hybrid_sat: the BLSTM on tri4's tied states and speaker-adapted features (made
    after the GMM stages), decoded with tri4's graph; the GMM systems are reused, not retrained."""
    r = mini_recipe
    proc = r.run("--exp", "hybsat", "experiment=hybrid_sat", *TINY, *TINY_GMM)
    done = done_stages(r.dir / "exp/hybsat")
    for stage in ("4.tri4", "4.tri4_dev", "4.tri4_feats", "4.sat_features", "5.train", "6.tune", "8.score"):
        assert stage in done, f"no record of {stage}:\n{proc.stderr[-3000:]}"
    tri4 = json.loads((r.dir / "exp/tri4/summary.json").read_text())
    train_log = (r.dir / "exp/hybsat/log/train.log").read_text()
    assert f"-> {tri4['num_pdfs']} pdfs" in train_log, train_log[-2000:]
    assert "name: sat40\n" in (r.dir / "exp/hybsat/.hydra/train/config.yaml").read_text()
    assert (r.dir / "feats/sat40/train/feat_dim").read_text() == "40\n"
    wer = json.loads((r.dir / "exp/hybsat/decode_eval2000/wer.json").read_text())
    assert wer["total"]["words"] > 0
    assert "exp/tri4/graph/graph.record.json" in (r.dir / "exp/hybsat/decode_eval2000/decode.record.json").read_text()
    if "4.tri4" in done_stages(r.dir / "exp/gmmhyb"):  # experiment=hybrid trained them first
        assert "exp/tri4: done already" in (r.dir / "exp/hybsat/log/gmm.log").read_text()
