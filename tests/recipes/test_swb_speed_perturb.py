"""recipes/swb300 with its corpus paths, preset and --speed-perturb written once in db.conf:
the perturb stage makes Kaldi's 3-way copy of train_nodup and the features follow it."""

from __future__ import annotations

import pytest

from asr.data.datadir import read_data_dir
from tests.fixtures.swb_corpus import corpus_options, quirky_corpus, tiny_ctc
from tests.recipes.conftest import REPO, Recipe, done_stages

pytestmark = pytest.mark.slow


def test_speed_perturbed_training_set_from_db_conf(tmp_path):
    recipe = Recipe(tmp_path, "swb300")
    options = corpus_options(quirky_corpus(), fisher=False)
    lines = [f"{name} {value}" for name, value in zip(options[::2], options[1::2])]
    (recipe.dir / "db.conf").write_text("\n".join(["--speed-perturb true", *lines, *tiny_ctc("swb300")]) + "\n")

    proc = recipe.run("--exp", "sp", "--stop-stage", "2")
    assert "options from" in proc.stderr and "db.conf" in proc.stderr
    done = done_stages(recipe.dir / "exp/sp")
    assert done == ["0.prepare", "1.validate", "2.features", "2.perturb"]

    train = read_data_dir(recipe.dir / "data/train_nodup")
    perturbed = read_data_dir(recipe.dir / "data/train_nodup_sp")
    assert 2 * len(train.utt2spk) < len(perturbed.utt2spk) <= 3 * len(train.utt2spk)  # < 10 ms segments go
    assert {u.split("-", 1)[0] for u in perturbed.utt2spk if u.startswith("sp")} == {"sp0.9", "sp1.1"}
    feats = (recipe.dir / "feats/logmel40/train_nodup_sp/feats.scp").read_text().splitlines()
    assert 2 * len(train.utt2spk) < len(feats) <= len(perturbed.utt2spk)
    assert not (recipe.dir / "feats/logmel40/train_nodup").exists()  # features of the perturbed set only


@pytest.mark.parametrize("name", ["swb300", "swb2000"])
def test_the_example_db_conf_parses_and_the_command_line_wins(tmp_path, name):
    recipe = Recipe(tmp_path, name)
    example = REPO / "recipes" / name / "db.conf.example"
    roots = ["--data-root", str(tmp_path / "d"), "--exp-root", str(tmp_path / "e")]
    proc = recipe.run("--config", str(example), *roots, "--stop-stage", "0", check=False)
    # every option of the file was accepted; prepare then refuses the corpus paths, which do not exist here
    assert proc.returncode == 2 and "stage 0 (prepare) failed (exit 2)" in proc.stderr
    assert (recipe.dir / "data").resolve() == tmp_path / "d/data"  # not the file's /scratch/asr
    assert "experiment=" in (recipe.dir / "exp/base/.done/0.prepare.cmd").read_text()
