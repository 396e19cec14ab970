"""`--cmd slurm` against a stand-in SLURM (tests/recipes/fake_slurm.py) that runs the jobs here
and records every call: array sizes, dependencies, the options of conf/slurm.conf, the same
outputs as `--cmd local`, and one line naming a failed task's log. Also the options written
once (db.conf), --data-root/--exp-root, a new --exp reusing the shared stages, and the
multi-node launcher's rendezvous options. On the tiny corpus, up to greedy decoding."""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path

import kaldiio
import numpy as np
import pytest

from tests.recipes import fake_slurm
from tests.recipes.conftest import TINY, Recipe

pytestmark = pytest.mark.slow

NJ = 3
SETS = ("train", "train_dev", "eval2000")
SLURM_CONF = """\
# sbatch options per stage
default --partition=cpu --time=0:30:00
features --mem=2G --cpus-per-task=1   # each array task
features.merge --mem=4G
train --partition=gpu --gpus-per-node=1 --nodes=1 --time=1:00:00
"""
# Up to features, then training and greedy decoding: the LM stage (5) is not needed for them.
FIRST = ["--stop-stage", "4"]
THEN = ["--stage", "6", "--stop-stage", "9", "--decode", "greedy", "--score", "jiwer"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slurm_recipe(root: Path) -> Recipe:
    recipe = Recipe(root, "mini")
    state = root / "slurm"
    recipe.env.update(fake_slurm.install(root / "bin", state))
    recipe.env.update(
        PATH=f"{root / 'bin'}:{recipe.env['PATH']}", ASR_SLURM_POLL_S="0.1", ASR_RDZV_PORT=str(free_port())
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
    logs = slurm.dir / "exp/base/log/3.features.slurm"
    assert sorted(p.name for p in logs.glob("*.log")) == [f"{i}.log" for i in range(NJ)] + ["merge.log"]
    assert "share 1 of 3" in (logs / "1.log").read_text()
    assert not list((slurm.dir / "feats/logmel40").glob("*.shares"))  # merged and removed


def test_other_stages_are_one_job_and_training_uses_the_sbatch_script(runs):
    slurm, _ = runs
    for name in ("synth", "prepare", "validate", "tokenizer", "decode", "score"):
        [job] = sbatch_calls(slurm, name)
        assert fake_slurm.option(job["argv"], "array") is None, name
        assert fake_slurm.option(job["argv"], "partition") == "cpu", name
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
    done = sorted(p.name for p in (slurm.dir / "exp/base/.done").iterdir() if not p.name.endswith(".cmd"))
    assert done == ["0.synth", "1.prepare", "2.validate", "3.features", "4.tokenizer", "6.train", "8.decode", "9.score"]
    assert json.loads((slurm.dir / "exp/base/decode_eval2000/wer.json").read_text())["total"]["words"] > 0


def test_slurm_outputs_equal_the_local_run(runs):
    slurm, local = runs
    for name in SETS:
        for table in ("text", "utt2spk", "segments", "wav.scp"):
            ours, theirs = slurm.dir / "data" / name / table, local.dir / "data" / name / table
            # wav.scp names the corpus by its absolute path: each recipe dir's own
            assert ours.read_text().replace(str(slurm.dir), "") == theirs.read_text().replace(str(local.dir), "")
        ours, theirs = slurm.dir / "feats/logmel40" / name, local.dir / "feats/logmel40" / name
        assert (ours / "utt2num_frames").read_text() == (theirs / "utt2num_frames").read_text()
        for scp in ("feats.scp", "cmvn.scp"):
            a, b = kaldiio.load_scp(str(ours / scp)), kaldiio.load_scp(str(theirs / scp))
            assert sorted(a) == sorted(b)
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"{name} {scp} {key}")

    # Decoding the same checkpoint here gives the same hypotheses as the slurm job did.
    decoded = slurm.dir / "exp/base/decode_eval2000"
    by_slurm = {f: (decoded / f).read_text() for f in ("hyp.txt", "hyp.ctm")}
    slurm.run(
        "--cmd", "local", "--exp", "base", "--stage", "8", "--stop-stage", "8", "--decode", "greedy", "--force", *TINY
    )
    assert {f: (decoded / f).read_text() for f in by_slurm} == by_slurm


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
    assert (root / "disk2/exp/base/.done/4.tokenizer").is_file()
    assert "synth=tiny" in (root / "disk2/exp/base/.done/0.synth").read_text()  # from db.conf

    # Another root for a recipe dir that has outputs is refused, naming what to move.
    proc = local.run("--exp", "base", "--data-root", str(root / "disk3"), check=False)
    assert proc.returncode == 2 and "data links to" in proc.stderr and "remove the link" in proc.stderr


def test_a_new_experiment_reuses_the_shared_stages(runs):
    _, local = runs
    proc = local.run("--exp", "second", *FIRST)
    for n, name in enumerate(("synth", "prepare", "validate", "features", "tokenizer")):
        assert f"stage {n} ({name}): done already by another experiment" in proc.stderr, name
    assert (local.dir / "exp/second/.done/3.features").is_file()
    # a data option changes what prepare makes: it runs again, and the stages after it
    proc = local.run("--exp", "third", "--stop-stage", "2", "data.dev_utts=15")
    assert "stage 1 (prepare): done already" not in proc.stderr and "stage 1 (prepare): python" in proc.stderr


def test_a_failed_task_ends_the_recipe_with_one_line_naming_its_log(tmp_path):
    recipe = slurm_recipe(tmp_path)
    recipe.run("--exp", "f", "--stop-stage", "2", *TINY)  # locally: the corpus and data dirs
    recipe.env["FAKE_SLURM_FAIL"] = "features:1"
    proc = recipe.run(
        "--cmd", "slurm", "--nj", str(NJ), "--exp", "f", "--stage", "3", "--stop-stage", "4", *TINY, check=False
    )
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    [array] = sbatch_calls(recipe, "features")
    [merge] = sbatch_calls(recipe, "features.merge")
    log = recipe.dir / "exp/f/log/3.features.slurm/1.log"
    assert errors == [errors[0]] and errors[0].endswith(
        f"ERROR: stage 3 (features) failed: slurm job {array['job']}_1 FAILED (exit 1:0); its log: {log}"
    )
    assert "lost its node" in log.read_text()
    assert not (recipe.dir / "exp/f/log/3.features.slurm/merge.log").exists()  # the merge never ran
    assert not (recipe.dir / "exp/f/.done/3.features").exists() and "stage 4" not in proc.stderr
    assert str(merge["job"]) in " ".join(c["argv"][0] for c in fake_slurm.calls(recipe.state, "scancel"))


def test_an_interrupted_recipe_cancels_the_jobs_it_waits_for(tmp_path):
    recipe = slurm_recipe(tmp_path)
    (recipe.state / "hold").touch()  # the cluster is full: the job stays pending
    proc = recipe.start("--cmd", "slurm", "--exp", "i", "--stop-stage", "0", *TINY, log=tmp_path / "run.log")
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
    recipe.run("--exp", "mn", "--stage", "6", "--stop-stage", "6", *args)
    words = (tmp_path / "torchrun.args").read_text().splitlines()
    assert words[words.index("--rdzv-id") + 1] == "mn"
    assert words[words.index("--local-addr") + 1] == "10.1.2.3"
    assert words[words.index("--rdzv-endpoint") + 1] == "node0:29500"
