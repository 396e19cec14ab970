"""scripts/recipe.sh on its own, with stand-in stages (seconds, no corpus): option values reach
the stages as one word, numeric options are checked and never evaluated, the command log is
replayable, and a stage's record (exp/NAME/.done/<N>.<stage>.record.json) runs it again when an
option or an input changed, and the stages that read what it remade."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from asr.config import load_config
from tests.recipes.conftest import REPO, TINY, Recipe

# Values that broke the recipes: spaces (word splitting), quotes, $ and ${ (expansion and
# OmegaConf interpolation), glob characters, backslashes next to quotes, Hydra's , [ ] =.
AWKWARD = [
    "/corpora/LDC97S62 v2",
    "/a/it's here",
    '/x/"dq"',
    "a\\b",
    "ends\\",
    "a\\'b",
    "$HOME/x",
    "x${y}z",
    "a\\${y}",
    "c,d [e] {f}",
    "tab\there",
    "/ü/ñ",
    "'",
    "*glob?",
    "=eq=",
]

# A recipe whose stages only record what they were given: `record NAME WORDS...` appends NAME
# and its words to ran.txt; the stage named in FAIL exits 3; prepare writes data/train/text
# once. `tokenize` stands for a stage that names its input in its own stage record, as the real
# ones do (asr/utils/record.py): it reads data/train/text and writes lang/tokens.txt.
FAKE_RECIPE = r"""#!/usr/bin/env bash
here=$PWD
cd "$(dirname "$0")"
RECIPE_ARGS=("$@")
. {scripts}/recipe.sh
corpus_option swbd_dir
corpus_list_option fisher_dirs fisher_dir
usage() {{ echo usage; }}
parse_options "$@"
corpus_overrides "$here" data=swb2000
record() {{ python3 -c 'import json, os, sys; name = sys.argv[1]
open("ran.txt", "a").write(json.dumps(sys.argv[1:]) + "\n")
if name == "prepare" and not os.path.exists("data/train/text"):
    os.makedirs("data/train", exist_ok=True)
    open("data/train/text", "w").write("u1 a b\n")
sys.exit(3 if os.environ.get("FAIL") == name else 0)' "$@"; }}
tokenize() {{ python -c 'import json, os
from asr.utils.record import write_record
open("ran.txt", "a").write(json.dumps(["tokenizer"]) + "\n")
os.makedirs("lang", exist_ok=True)
open("lang/tokens.txt", "w").write(" ".join(sorted(set(open("data/train/text").read().split()))))
write_record("lang", "tokenizer", "stand-in", {{}}, ["data/train/text"], {{"tokens.txt": True}})'; }}
run_stage 0 prepare   record prepare "${{overrides[@]}}"
run_stage 1 validate  record validate "$(override_value data.data_dir data)/train"
run_stage 1 tokenizer tokenize
run_stage 2 train     record train "${{overrides[@]}}"
run_stage 3 decode    record decode "${{overrides[@]}}"
run_stage 4 score     record score "${{overrides[@]}}"
run_stage 3 decode_greedy record decode_greedy "${{overrides[@]}}"
run_stage 4 score_greedy  record score_greedy "${{overrides[@]}}"
"""
ALL = ["prepare", "validate", "tokenizer", "train", "decode", "score", "decode_greedy", "score_greedy"]


@pytest.fixture
def fake(tmp_path):
    recipe_dir = tmp_path / "recipe"
    recipe_dir.mkdir()
    (recipe_dir / "run.sh").write_text(FAKE_RECIPE.format(scripts=REPO / "scripts"))
    return recipe_dir


def run(recipe_dir: Path, *args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(recipe_dir / "run.sh"), *args],
        cwd=cwd or recipe_dir,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def ran(recipe_dir: Path) -> list[list[str]]:
    """The stages that ran since the last call, each as [name, words...]."""
    path = recipe_dir / "ran.txt"
    lines = path.read_text().splitlines() if path.is_file() else []
    path.unlink(missing_ok=True)
    return [json.loads(line) for line in lines]


def test_hydra_quote_round_trips_through_hydra_and_omegaconf():
    script = f'. {shlex.quote(str(REPO / "scripts/recipe.sh"))}; for v in "$@"; do hydra_quote "$v"; echo; done'
    quoted = subprocess.run(
        ["bash", "-c", script, "quote", *AWKWARD], capture_output=True, text=True, check=True
    ).stdout
    for value, hydra_value in zip(AWKWARD, quoted.splitlines()):
        assert load_config([f"data.swbd_dir={hydra_value}"], check=False).data.swbd_dir == value, hydra_value


def test_corpus_paths_reach_the_stage_whole(fake, tmp_path):
    start = tmp_path / "start here"
    start.mkdir()
    proc = run(
        fake,
        "--exp",
        "q",
        "--swbd-dir",
        "rel dir/it's",
        "--fisher-dirs",
        "/f1 /f2*",
        "--fisher-dir",
        "/f 3",
        "--stop-stage",
        "0",
        cwd=start,
    )
    assert proc.returncode == 0, proc.stderr
    (prepare,) = ran(fake)
    cfg = load_config([o for o in prepare[1:] if o.startswith("data.")], check=False)
    assert cfg.data.swbd_dir == f"{start}/rel dir/it's"  # relative to where run.sh was started
    assert list(cfg.data.fisher_dirs) == ["/f1", "/f2*", "/f 3"]  # split at white space, never globbed


@pytest.mark.parametrize(
    "option, value",
    [
        ("--stage", "nproc[$(touch INJECTED)]"),
        ("--stop-stage", "1+1"),
        ("--stage", "-2"),
        ("--nproc", "a[$(touch INJECTED)]"),
        ("--max-restarts", "-1"),
        ("--nnodes", "2x"),
        ("--node-rank", ""),
    ],
)
def test_numeric_options_are_checked_never_evaluated(fake, option, value):
    proc = run(fake, "--exp", "n", option, value)
    assert proc.returncode == 2
    expected = "a stage number (-1 or more)" if "stage" in option else "a non-negative integer"
    assert f"{option} '{value}': expected {expected}" in proc.stderr
    assert not (fake / "INJECTED").exists() and not (fake / "ran.txt").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--stage", "3", "--stop-stage", "1"], "--stage 3 is after --stop-stage 1"),
        (["--exp", "a/b"], "--exp 'a/b': a name, not a path"),
        (["--nnodes", "2"], "--nnodes 2 needs --rdzv-endpoint"),
        (["--bogus", "1"], "unknown option --bogus"),
        (["--stage"], "--stage needs a value"),
        (["stray"], "unexpected argument 'stray'"),
    ],
)
def test_option_mistakes_exit_2_before_any_stage(fake, args, message):
    proc = run(fake, *args)
    assert proc.returncode == 2 and message in proc.stderr
    assert not (fake / "ran.txt").exists()


def test_command_log_replays_the_same_run(fake, tmp_path):
    start = tmp_path / "from here"
    start.mkdir()
    args = ["--exp", "r", "--swbd-dir", 'it\'s a "dir"', "model.name='a b'", "--stop-stage", "0"]
    assert run(fake, *args, cwd=start).returncode == 0
    first = ran(fake)
    logged = (fake / "exp/r/commands.log").read_text().splitlines()[-1].split("\t")[1]
    subprocess.run(["bash", "-c", logged + " --force"], capture_output=True, text=True, check=True, timeout=60)
    assert ran(fake) == first
    stage_cmd = (fake / "exp/r/.done/0.prepare.cmd").read_text()
    assert shlex.split(stage_cmd)[2:] == first[0][1:]  # `record prepare WORDS...`, quoted the same way


def test_done_stage_reruns_when_its_options_change_and_the_later_stages_follow(fake):
    assert run(fake, "--exp", "d", "train.epochs=1").returncode == 0
    assert [r[0] for r in ran(fake)] == ALL
    # a side stage (decode_greedy, numbered like decode) leaves the score that ran before it done
    assert sorted(p.name for p in (fake / "exp/d/.done").iterdir() if p.suffix != ".cmd") == [
        f"{stage}.record.json"
        for stage in (
            "0.prepare",
            "1.tokenizer",
            "1.validate",
            "2.train",
            "3.decode",
            "3.decode_greedy",
            "4.score",
            "4.score_greedy",
        )
    ]

    proc = run(fake, "--exp", "d", "train.epochs=1")
    assert ran(fake) == [] and proc.stderr.count("done already") == len(ALL)

    # A train option: prepare does not read the train group; train runs again, then decode.
    proc = run(fake, "--exp", "d", "train.epochs=2")
    assert [r[0] for r in ran(fake)] == ["train", "decode", "score", "decode_greedy", "score_greedy"]
    assert "stage 2 (train): done before, but an option or an input changed; running it again" in proc.stderr
    assert "- train.epochs=1" in proc.stderr and "+ train.epochs=2" in proc.stderr

    # A data option re-runs prepare, and so every stage after it that names no inputs; the
    # tokenizer names its one input, which prepare left as it was.
    assert run(fake, "--exp", "d", "train.epochs=2", "data.dev_utts=5").returncode == 0
    assert [r[0] for r in ran(fake)] == [s for s in ALL if s != "tokenizer"]

    # An option only scoring reads: the scores run again, nothing before them.
    assert run(fake, "--exp", "d", "train.epochs=2", "data.dev_utts=5", "score.per_speaker=false").returncode == 0
    assert [r[0] for r in ran(fake)] == ["score", "score_greedy"]


def test_an_experiment_reruns_only_the_stages_that_read_a_group_it_sets(fake):
    assert run(fake, "--exp", "base").returncode == 0
    ran(fake)
    # mini_ssgd sets distributed and train: the data stages another experiment made are done
    proc = run(fake, "--exp", "x", "experiment=mini_ssgd")
    assert proc.returncode == 0, proc.stderr
    assert [r[0] for r in ran(fake)] == ["train", "decode", "score", "decode_greedy", "score_greedy"]
    assert proc.stderr.count("done already by another experiment") == 3  # prepare, validate, tokenizer

    # hybrid sets decode, model and train: train runs again, named by its changed word
    proc = run(fake, "--exp", "x", "experiment=hybrid")
    assert [r[0] for r in ran(fake)] == ["train", "decode", "score", "decode_greedy", "score_greedy"]
    assert "- experiment=mini_ssgd" in proc.stderr and "+ experiment=hybrid" in proc.stderr


def test_an_experiment_run_sh_cannot_read_counts_for_every_stage(fake, tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    (conf / "experiment" / "broken.yaml").write_text("defaults: [\n")
    env = dict(os.environ, ASR_CONF_DIR=str(conf))
    assert run(fake, "--exp", "base", env=env).returncode == 0
    ran(fake)
    # conf/experiment/broken.yaml is no YAML: every stage runs again with it (the real stages'
    # Hydra then names the problem)
    assert run(fake, "--exp", "x", "experiment=broken", env=env).returncode == 0
    # (the stand-in tokenizer's command has no overrides: nothing of it changed)
    assert [r[0] for r in ran(fake)] == [s for s in ALL if s != "tokenizer"]
    # an experiment that does not exist at all is refused before any stage
    proc = run(fake, "--exp", "y", "experiment=no_such", env=env)
    assert proc.returncode == 2 and "experiment=no_such: no such choice" in proc.stderr and ran(fake) == []


def test_an_edited_input_reruns_the_stage_reading_it_and_those_after_it(fake):
    assert run(fake, "--exp", "e").returncode == 0
    ran(fake)
    text = fake / "data/train/text"
    os.utime(text)  # touched, the same bytes: nothing changed
    assert run(fake, "--exp", "e").returncode == 0 and ran(fake) == []

    text.write_text("u1 a c\n")
    proc = run(fake, "--exp", "e")
    # the tokenizer names data/train/text; train names no input, so it follows what ran before it
    assert [r[0] for r in ran(fake)] == ALL[2:]
    assert "stage 1 (tokenizer): done before, but an option or an input changed" in proc.stderr
    assert f"  input {text}" in proc.stderr
    assert "stage 0 (prepare): done already" in proc.stderr and "stage 1 (validate): done already" in proc.stderr

    (fake / "lang/tokens.txt").unlink()  # an output gone: its stage runs again
    proc = run(fake, "--exp", "e")
    assert [r[0] for r in ran(fake)] == ALL[2:] and f"output {fake}/lang/tokens.txt: missing" in proc.stderr

    assert run(fake, "--exp", "e", "--force").returncode == 0
    assert [r[0] for r in ran(fake)] == ALL


def test_failed_stage_exits_with_its_status_and_leaves_no_record(fake):
    env = dict(os.environ, FAIL="train")
    proc = run(fake, "--exp", "f", env=env)
    assert proc.returncode == 3 and "stage 2 (train) failed (exit 3)" in proc.stderr
    done = fake / "exp/f/.done"
    assert (done / "0.prepare.record.json").is_file() and not (done / "2.train.record.json").exists()
    ran(fake)
    assert run(fake, "--exp", "f").returncode == 0
    assert [r[0] for r in ran(fake)] == ["train", "decode", "score", "decode_greedy", "score_greedy"]
    # commands.log says how each run ended; one that never got to (killed) is named by the next
    log = fake / "exp/f/commands.log"
    assert [line.split("\t")[2:] for line in log.read_text().splitlines()] == [["exit 3"], ["exit 0"]]
    log.write_text(log.read_text() + "2026-01-01 00:00:00\tbash run.sh --exp f")  # a run killed -9
    assert run(fake, "--exp", "f").returncode == 0
    assert [line.split("\t")[2:] for line in log.read_text().splitlines()] == [
        ["exit 3"],
        ["exit 0"],
        ["killed"],
        ["exit 0"],
    ]


def test_markers_of_older_recipes_still_count_as_done(fake):
    assert run(fake, "--exp", "o").returncode == 0
    ran(fake)
    shutil.rmtree(fake / "data/.done")
    records = sorted((fake / "exp/o/.done").glob("*.record.json"))
    for record in records:
        record.unlink()  # what the recipes wrote before stage records: a marker with the date
        record.with_name(record.name.removesuffix(".record.json")).write_text("2024-01-01 00:00:00\n")
    proc = run(fake, "--exp", "o", "train.epochs=9")
    assert proc.returncode == 0 and ran(fake) == [], proc.stderr
    assert sorted((fake / "exp/o/.done").glob("*.record.json")) == records
    assert proc.stderr.count("marker of an older run.sh") == len(ALL)
    assert run(fake, "--exp", "o", "train.epochs=9").returncode == 0 and ran(fake) == []


def test_the_real_recipes_use_the_checked_options(tmp_path):
    recipe = Recipe(tmp_path, "mini")
    proc = recipe.run("--stage", "nproc[$(touch INJECTED)]", check=False)
    assert proc.returncode == 2 and not list(tmp_path.rglob("INJECTED"))
    proc = recipe.run("--decode", "beam", "--stage", "7", check=False)
    assert proc.returncode == 2 and "--decode 'beam': choose beam_lm or greedy" in proc.stderr


def test_a_misspelt_override_stops_the_recipe_before_any_stage_even_skipped_ones(fake):
    proc = run(fake, "--exp", "typo", "--stage", "3", "--stop-stage", "3", "train.epoch=2", "distributed=foo")
    assert proc.returncode == 2 and ran(fake) == [], proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 2, proc.stderr
    assert "train.epoch: unknown key; did you mean train.epochs?" in errors[0]
    assert "distributed=foo: no such choice; choose one of adpsgd, hadpsgd, none, ssgd" in errors[1]
    assert "Config search path" not in proc.stderr and not (fake / "exp" / "typo").exists()


@pytest.mark.parametrize("name", ["mini", "swb300", "swb2000"])
def test_help_from_any_directory_prints_the_whole_opening_comment(name):
    script = REPO / "recipes" / name / "run.sh"
    comment = []
    for line in script.read_text().splitlines()[1:]:
        if not line.startswith("#"):
            break
        comment.append(line.removeprefix("#").removeprefix(" "))
    proc = subprocess.run(["bash", f"recipes/{name}/run.sh", "--help"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.splitlines() == comment, proc.stderr
    assert "Stages" in proc.stdout and proc.stdout.rstrip().endswith((".", ")"))  # not cut mid-sentence


def test_a_stage_past_the_last_is_a_usage_error(tmp_path):
    proc = Recipe(tmp_path, "mini").run("--stage", "9", check=False)
    assert proc.returncode == 2 and "--stage 9: the last stage is 8 (score)" in proc.stderr


# run.sh waits 5 s for a held lock before it refuses (a killed run's stages may still be exiting);
# a run that must be refused waits a tenth of that.
REFUSED_SOON = dict(os.environ, ASR_RUN_LOCK_WAIT_S="0.5")


def test_each_node_of_a_multi_node_job_locks_only_its_own_rank(fake):
    """Every machine of a multi-node job runs the same command on the shared experiment dir."""
    lock = fake / "exp" / "m" / ".run.node1.lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    holder = subprocess.Popen(
        ["flock", str(lock), "sh", "-c", f"echo 'pid 77' > '{lock}'; sleep 30"], start_new_session=True
    )
    node = ("--exp", "m", "--nnodes", "2", "--rdzv-endpoint", "node0:29500", "--stage", "2", "--stop-stage", "2")
    try:
        deadline = time.time() + 10
        while "77" not in lock.read_text():
            assert time.time() < deadline
        proc = run(fake, *node, "--node-rank", "1", env=REFUSED_SOON)
        assert proc.returncode == 2 and "in use by another run.sh of node rank 1 (pid 77)" in proc.stderr
        assert run(fake, *node, "--node-rank", "0").returncode == 0  # node 0 is not held up by node 1
        assert [r[0] for r in ran(fake)] == ["train"]
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()


def test_a_second_run_of_the_same_experiment_is_refused_naming_the_first(fake):
    lock = fake / "exp" / "l" / ".run.lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    # What a running run.sh holds: the lock, with its pid, host and start in the file.
    holder = subprocess.Popen(
        ["flock", str(lock), "sh", "-c", f"echo 'pid 4242 on node7 since 2026-01-01 10:00:00' > '{lock}'; sleep 30"],
        start_new_session=True,
    )
    try:
        deadline = time.time() + 10
        while "4242" not in lock.read_text():
            assert time.time() < deadline
        proc = run(fake, "--exp", "l", env=REFUSED_SOON)
        assert proc.returncode == 2 and ran(fake) == []
        assert "exp/l is in use by another run.sh (pid 4242 on node7 since 2026-01-01 10:00:00)" in proc.stderr
        assert run(fake, "--exp", "other").returncode == 0  # other experiments are not held up
        ran(fake)
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # the run and its stages (they inherit the lock)
        holder.wait()
    proc = run(fake, "--exp", "l")
    assert proc.returncode == 0  # the lock ends with its holder: nothing stale
    # prepare, validate and tokenizer (shared data/, lang/) were done by --exp other: a new
    # experiment reuses them
    assert [r[0] for r in ran(fake)] == ALL[3:]
    assert "stage 0 (prepare): done already by another experiment" in proc.stderr


def test_the_readmes_try_is_the_smoke_tests_run():
    """The Quickstart's one-minute try runs the overrides the mini smoke test runs (less its
    thread counts), so the test keeps the README's command working."""
    text = (REPO / "README.md").read_text()
    command = text[text.index("./run.sh --exp try") :].split("```")[0].replace("\\\n", " ")
    overrides = {word for word in shlex.split(command) if "=" in word}
    assert overrides == set(TINY) - {"train.threads=1", "features.jobs=1"}


GMM_RECIPE = r"""#!/usr/bin/env bash
here=$PWD
cd "$(dirname "$0")"
RECIPE_ARGS=("$@")
. {scripts}/recipe.sh
usage() {{ echo usage; }}
parse_options "$@"
record() {{ python3 -c 'import json, sys; open("ran.txt", "a").write(json.dumps(sys.argv[1:]) + "\n")' "$@"; }}
run_stage 4 tri1 record tri1 "${{overrides[@]}}"
"""


def test_a_gmm_stage_under_slurm_drives_arrays_from_here(tmp_path):
    """--cmd slurm: a GMM stage's driver runs where run.sh runs and submits each pass's --nj jobs
    itself (gmm.submit=slurm) with the stage's sbatch options of conf/slurm.conf, quoted for Hydra."""
    from tests.recipes import fake_slurm

    recipe_dir = tmp_path / "recipe"
    (recipe_dir / "conf").mkdir(parents=True)
    (recipe_dir / "run.sh").write_text(GMM_RECIPE.format(scripts=REPO / "scripts"))
    (recipe_dir / "conf/slurm.conf").write_text("default --partition=cpu\ntri1 --mem=4G --time=2:00:00\n")
    env = dict(os.environ, **fake_slurm.install(tmp_path / "bin", tmp_path / "state"))
    env["PATH"] = f"{tmp_path / 'bin'}:{env['PATH']}"
    done = run(recipe_dir, "--cmd", "slurm", "--nj", "3", env=env)
    assert done.returncode == 0, done.stderr
    [[name, *words]] = ran(recipe_dir)
    assert name == "tri1" and words[-3:-1] == ["gmm.submit=slurm", "gmm.nj=3"]
    cfg = load_config([words[-1]])
    assert list(cfg.gmm.sbatch) == ["--partition=cpu", "--mem=4G", "--time=2:00:00"]
    assert not fake_slurm.calls(tmp_path / "state", "sbatch")  # the stage itself submits its arrays
