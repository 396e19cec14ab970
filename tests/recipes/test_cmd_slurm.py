"""`--cmd slurm` against a stand-in SLURM (tests/recipes/fake_slurm.py) that runs the jobs here
and records every call: array sizes, dependencies, the options of conf/slurm.conf, the same
outputs as `--cmd local`, and one line naming a failed task's log. Also the options written
once (db.conf), --data-root/--exp-root, a new --exp reusing the shared stages, and the
multi-node launcher's rendezvous options. On the tiny corpus, up to LM decoding."""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path

import kaldiio
import numpy as np
import pytest

from tests.features.test_ivector_recipe import SMALL_IVECTOR
from tests.features.test_recipes import SMALL_FMLLR
from tests.recipes import fake_slurm
from tests.recipes.conftest import TINY, Recipe, done_stages

pytestmark = pytest.mark.slow

NJ = 2
SETS = ("train", "train_dev", "eval2000")
SLURM_CONF = """\
# sbatch options per stage
default --partition=cpu --time=0:30:00
features --mem=2G --cpus-per-task=1   # each array task
features.merge --mem=4G
train --partition=gpu --gpus-per-node=1 --nodes=1 --time=1:00:00
"""
# Up to the tokenizer, then the LM, training, tuning on a small grid, LM and greedy decoding.
FIRST = ["--stop-stage", "3"]
SMALL_GRID = ["decode.tune_lm_weights=[0.3,0.8]", "decode.tune_word_scores=[0.0,1.0]", "decode.jobs=1"]
THEN = ["--stage", "4", "--stop-stage", "8", "--score", "jiwer", *SMALL_GRID]
SPLIT = ("features", "tune", "decode", "decode_greedy")  # --nj array tasks, then a merge job
# How often run.sh asks the stand-in squeue: each call starts a Python interpreter (about 45 ms
# of CPU), and the module's runs wait about 100 s on their jobs. Every 0.1 s that was 609 calls,
# 27 s of CPU; every 0.25 s a job is seen ended 0.08 s later on average.
POLL_S = "0.25"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slurm_recipe(root: Path) -> Recipe:
    recipe = Recipe(root, "mini")
    state = root / "slurm"
    recipe.env.update(fake_slurm.install(root / "bin", state))
    recipe.env.update(
        PATH=f"{root / 'bin'}:{recipe.env['PATH']}", ASR_SLURM_POLL_S=POLL_S, ASR_RDZV_PORT=str(free_port())
    )
    recipe.state = state
    (recipe.dir / "conf").mkdir()
    (recipe.dir / "conf/slurm.conf").write_text(SLURM_CONF)
    return recipe


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same tiny run with --cmd slurm and with --cmd local (the latter's data and exp on
    other 'disks', its corpus options and preset in db.conf)."""
    slurm = slurm_recipe(tmp_path_factory.mktemp("slurm"))
    slurm.run("--cmd", "slurm", "--nj", str(NJ), "--exp", "base", *FIRST, *TINY)
    slurm.run("--cmd", "slurm", "--nj", str(NJ), "--exp", "base", *THEN, *TINY)

    local_root = tmp_path_factory.mktemp("local")
    local = Recipe(local_root, "mini")
    config = "\n".join(["# written once", "--data-root ../../disk1", f"--exp-root {local_root}/disk2", *TINY])
    (local.dir / "db.conf").write_text(config + "\n")
    local.run("--nj", "2", "--exp", "base", *FIRST)
    return slurm, local


def sbatch_calls(recipe: Recipe, name: str) -> list[dict]:
    return [c for c in fake_slurm.calls(recipe.state, "sbatch") if fake_slurm.option(c["argv"], "job-name") == name]


def test_features_run_as_an_array_then_a_merge_job_after_it(runs):
    slurm, _ = runs
    [array] = sbatch_calls(slurm, "features")
    [merge] = sbatch_calls(slurm, "features.merge")
    assert fake_slurm.option(array["argv"], "array") == f"0-{NJ - 1}"
    assert fake_slurm.option(merge["argv"], "dependency") == f"afterok:{array['job']}"
    assert fake_slurm.option(merge["argv"], "array") is None
    # conf/slurm.conf: the default, then the stage's, then the merge job's options (last wins)
    assert fake_slurm.option(array["argv"], "partition") == "cpu"
    assert fake_slurm.option(array["argv"], "mem") == "2G"
    assert fake_slurm.option(merge["argv"], "mem") == "4G"
    assert fake_slurm.option(merge["argv"], "time") == "0:30:00"
    logs = slurm.dir / "exp/base/log/2.features.slurm"
    assert sorted(p.name for p in logs.glob("*.log")) == [f"{i}.log" for i in range(NJ)] + ["merge.log"]
    assert f"share 1 of {NJ}" in (logs / "1.log").read_text()
    assert not list((slurm.dir / "feats/logmel40").glob("*.shares"))  # merged and removed


def test_decoding_and_tuning_run_as_arrays_then_a_merge_job(runs):
    slurm, _ = runs
    for name, n in (("tune", 6), ("decode", 7), ("decode_greedy", 7)):
        [array] = sbatch_calls(slurm, name)
        [merge] = sbatch_calls(slurm, f"{name}.merge")
        assert fake_slurm.option(array["argv"], "array") == f"0-{NJ - 1}", name
        assert fake_slurm.option(merge["argv"], "dependency") == f"afterok:{array['job']}", name
        logs = slurm.dir / f"exp/base/log/{n}.{name}.slurm"
        assert sorted(p.name for p in logs.glob("*.log")) == [f"{i}.log" for i in range(NJ)] + ["merge.log"]
        assert f"share 1-of-{NJ}" in (logs / "1.log").read_text(), name
    exp = slurm.dir / "exp/base"
    assert not list(exp.glob("*.shares")), "the merge jobs remove the shares"
    decoded = {line.split()[0] for line in (exp / "decode_eval2000/hyp.txt").read_text().splitlines()}
    assert decoded == set((slurm.dir / "feats/logmel40/eval2000/utt2num_frames").read_text().split()[::2])


def test_other_stages_are_one_job_and_training_uses_the_sbatch_script(runs):
    slurm, _ = runs
    for name in ("synth", "prepare", "validate", "tokenizer", "lm", "lang", "score", "score_greedy"):
        [job] = sbatch_calls(slurm, name)
        assert fake_slurm.option(job["argv"], "array") is None, name
        assert fake_slurm.option(job["argv"], "partition") == "cpu", name
        assert not sbatch_calls(slurm, f"{name}.merge"), name
    [train] = sbatch_calls(slurm, "train")
    script = next(w for w in train["argv"] if not w.startswith("-"))
    assert script.endswith("scripts/slurm/train.sbatch")
    assert fake_slurm.option(train["argv"], "partition") == "gpu"
    assert fake_slurm.option(train["argv"], "gpus-per-node") == "1"
    assert "exp_name='base'" in train["argv"]  # the overrides go to the script
    [srun] = fake_slurm.calls(slurm.state, "srun")
    assert "torchrun" in srun["argv"] and srun["argv"][srun["argv"].index("--rdzv-id") + 1] == str(train["job"])
    # every job waited for: squeue until the job left the queue, then sacct for its tasks' states
    assert fake_slurm.calls(slurm.state, "sacct")
    done = done_stages(slurm.dir / "exp/base")
    assert done == [
        "-1.synth",
        "0.prepare",
        "1.validate",
        "2.features",
        "3.tokenizer",
        "4.lang",
        "4.lm",
        "5.train",
        "6.tune",
        "7.decode",
        "7.decode_greedy",
        "8.score",
        "8.score_greedy",
    ]
    assert json.loads((slurm.dir / "exp/base/decode_eval2000/wer.json").read_text())["total"]["words"] > 0


def test_local_nj_sets_the_stages_own_parallelism(runs):
    _, local = runs
    overrides = (local.dir / "exp/base/.hydra/features/overrides.yaml").read_text()
    assert "features.jobs=2" in overrides.splitlines()[-1]  # after TINY's features.jobs=1: --nj wins


def test_data_and_exp_roots_and_the_written_once_options(runs):
    _, local = runs
    root = local.dir.parents[1]
    for name in ("data", "feats", "lang"):
        assert (local.dir / name).is_symlink() and (local.dir / name).resolve() == root / "disk1" / name
    assert (local.dir / "exp").resolve() == root / "disk2/exp"
    assert (root / "disk1/feats/logmel40/train/feats.scp").is_file()
    assert (root / "disk2/exp/base/.done/3.tokenizer.record.json").is_file()
    assert (
        "synth=tiny" in json.loads((root / "disk2/exp/base/.done/-1.synth.record.json").read_text())["options"]
    )  # from db.conf
    # the mini recipe's synthetic corpus follows the data root too
    assert (local.dir / "corpus").resolve() == root / "disk1/corpus" and (root / "disk1/corpus/LDC97S62").is_dir()

    # Another root for a recipe dir that has outputs is refused, naming what to move.
    proc = local.run("--exp", "base", "--data-root", str(root / "disk3"), check=False)
    assert proc.returncode == 2 and "data links to" in proc.stderr and "remove the link" in proc.stderr


def test_a_new_experiment_reuses_the_shared_stages(runs):
    _, local = runs
    proc = local.run("--exp", "second", *FIRST)
    for n, name in enumerate(("synth", "prepare", "validate", "features", "tokenizer"), start=-1):
        assert f"stage {n} ({name}): done already by another experiment" in proc.stderr, name
    assert (local.dir / "exp/second/.done/2.features.record.json").is_file()


def test_a_failed_task_ends_the_recipe_with_one_line_naming_its_log(runs, tmp_path):
    recipe = slurm_recipe(tmp_path)
    (recipe.dir / "corpus").symlink_to(runs[0].dir / "corpus")  # the module's corpus, not synthesised again
    recipe.run("--exp", "f", "--stage", "0", "--stop-stage", "1", *TINY)  # locally: the data dirs
    recipe.env["FAKE_SLURM_FAIL"] = "features:1"
    proc = recipe.run(
        "--cmd", "slurm", "--nj", str(NJ), "--exp", "f", "--stage", "2", "--stop-stage", "3", *TINY, check=False
    )
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    [array] = sbatch_calls(recipe, "features")
    [merge] = sbatch_calls(recipe, "features.merge")
    log = recipe.dir / "exp/f/log/2.features.slurm/1.log"
    assert errors == [errors[0]] and errors[0].endswith(
        f"ERROR: stage 2 (features) failed: slurm job {array['job']}_1 FAILED (exit 1:0); its log: {log}"
    )
    assert "lost its node" in log.read_text()
    assert not (recipe.dir / "exp/f/log/2.features.slurm/merge.log").exists()  # the merge never ran
    assert not (recipe.dir / "exp/f/.done/2.features.record.json").exists() and "stage 3" not in proc.stderr
    assert str(merge["job"]) in " ".join(c["argv"][0] for c in fake_slurm.calls(recipe.state, "scancel"))


def test_an_interrupted_recipe_cancels_the_jobs_it_waits_for(tmp_path):
    recipe = slurm_recipe(tmp_path)
    (recipe.state / "hold").touch()  # the cluster is full: the job stays pending
    proc = recipe.start("--cmd", "slurm", "--exp", "i", "--stop-stage", "-1", *TINY, log=tmp_path / "run.log")
    deadline = time.time() + 60
    while not fake_slurm.calls(recipe.state, "squeue"):  # submitted, and waiting
        assert time.time() < deadline and proc.poll() is None, (tmp_path / "run.log").read_text()
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    [job] = sbatch_calls(recipe, "synth")
    assert [c["argv"] for c in fake_slurm.calls(recipe.state, "scancel")] == [[str(job["job"])]]
    assert (recipe.state / "jobs" / str(job["job"]) / "-.state").read_text().startswith("CANCELLED")
    (recipe.state / "hold").unlink()


@pytest.mark.parametrize(
    "conf, message",
    [
        ("featurs --mem=1G\n", "slurm.conf:1: 'featurs' is not a stage"),
        ("# c\ndecode --time 1:00\n", "slurm.conf:2: '1:00' is not an sbatch option"),
    ],
)
def test_a_bad_slurm_conf_line_exits_2_naming_it(tmp_path, conf, message):
    recipe = slurm_recipe(tmp_path)
    (recipe.dir / "conf/slurm.conf").write_text(conf)
    proc = recipe.run("--cmd", "slurm", "--exp", "x", check=False)
    assert proc.returncode == 2 and message in proc.stderr
    assert not fake_slurm.calls(recipe.state, "sbatch")


def test_multi_node_training_gets_a_rendezvous_id_and_the_local_address(tmp_path):
    recipe = Recipe(tmp_path, "mini")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "torchrun").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{tmp_path}/torchrun.args"\n')
    (bin_dir / "torchrun").chmod(0o755)
    recipe.env["PATH"] = f"{bin_dir}:{recipe.env['PATH']}"
    args = ["--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "node0:29500", "--local-addr", "10.1.2.3"]
    recipe.run("--exp", "mn", "--stage", "5", "--stop-stage", "5", *args)
    words = (tmp_path / "torchrun.args").read_text().splitlines()
    assert words[words.index("--rdzv-id") + 1] == "mn"
    assert words[words.index("--local-addr") + 1] == "10.1.2.3"
    assert words[words.index("--rdzv-endpoint") + 1] == "node0:29500"


def features_calls(recipe: Recipe, exp: str, name: str) -> list[dict]:
    return [c for c in sbatch_calls(recipe, name) if f"/exp/{exp}/log/" in fake_slurm.option(c["argv"], "output")]


# Stage 0 and 1 are done already in both recipes (by --exp base, with TINY's options).
@pytest.mark.parametrize(
    "recipe, small, models",
    [
        ("fmllr40_logmel40_deltas", SMALL_FMLLR, ("gmm/final.mat", "gmm/final.dubm")),
        ("ivector100", SMALL_IVECTOR, ("extractor/final.mat", "extractor/final.ubm", "extractor/final.ie")),
    ],
)
def test_fmllr_and_ivector_features_split_and_merge_to_the_local_result(runs, recipe, small, models):
    """The array tasks compute the log-mel shares; the merge job joins them, fits the model and
    adapts (fMLLR) or extracts (i-vectors): the same files as one local run."""
    slurm, local = runs
    args = ["--exp", recipe, "--stage", "0", "--stop-stage", "2", *TINY, f"features={recipe}", *small]
    slurm.run("--cmd", "slurm", "--nj", str(NJ), *args)
    local.run(*args)
    [array] = features_calls(slurm, recipe, "features")
    [merge] = features_calls(slurm, recipe, "features.merge")
    assert fake_slurm.option(array["argv"], "array") == f"0-{NJ - 1}"
    assert fake_slurm.option(merge["argv"], "dependency") == f"afterok:{array['job']}"
    assert (slurm.dir / "data/train/text").read_text() == (local.dir / "data/train/text").read_text()
    ours, theirs = slurm.dir / "feats" / recipe, local.dir / "feats" / recipe
    assert not list(ours.rglob("*.shares")) and (ours / "fbank/train/feats.scp").is_file()
    for model in models:  # the same bytes: the shares' log-mel and statistics are one run's
        assert (ours / model).read_bytes() == (theirs / model).read_bytes(), model
    tables = sorted(p.relative_to(ours) for p in ours.rglob("*.scp") if p.name != "wav.scp")
    assert tables == sorted(p.relative_to(theirs) for p in theirs.rglob("*.scp") if p.name != "wav.scp")
    assert any(t.parts[0] in SETS for t in tables), tables  # the adapted / per-frame i-vector sets
    for table in tables:  # the .scp files name each recipe dir's own paths: compare what they hold
        a, b = kaldiio.load_scp(str(ours / table)), kaldiio.load_scp(str(theirs / table))
        assert sorted(a) == sorted(b), table
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{table} {key}")


# Last: the fmllr and i-vector runs above reuse base's data, which this prepares again.
def test_a_data_option_runs_prepare_again_and_the_stages_after_it(runs):
    _, local = runs
    proc = local.run("--exp", "third", "--stop-stage", "1", "data.dev_utts=15")
    assert "stage 0 (prepare): done already" not in proc.stderr and "stage 0 (prepare): python" in proc.stderr
