"""asr/utils/experiment_groups.py: the config groups an experiment= override sets, read from the
shipped experiments and from ones written here, against what Hydra composes."""

from __future__ import annotations

from pathlib import Path

from asr.config import load_config
from asr.utils.experiment_groups import CONF_DIR, EVERY_GROUP, experiment_choice, experiment_groups, main


def test_shipped_experiments_name_their_keys_their_overrides_and_the_experiments_they_include():
    assert experiment_groups("mini_ssgd") == {"distributed", "train"}
    assert experiment_groups("hybrid") == {"decode", "model", "train"}
    assert experiment_groups("swb300_hybrid_ssgd") == {
        "decode",
        "distributed",
        "features",
        "model",
        "tokenizer",
        "train",
    }


def test_every_group_an_experiment_changes_in_the_composed_config_is_named():
    base = load_config(["data=mini"], check=False)
    for path in sorted((Path(CONF_DIR) / "experiment").glob("*.yaml")):
        composed = load_config(["data=mini", f"experiment={path.stem}"], check=False)
        changed = {group for group in base if base[group] != composed[group]}
        assert changed and changed <= experiment_groups(path.stem), path.stem


def test_an_experiment_that_cannot_be_read_counts_for_every_group(tmp_path, capsys):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment/loop.yaml").write_text("defaults:\n  - loop\n")
    (tmp_path / "experiment/bad.yaml").write_text("train: [unclosed\n")
    assert experiment_groups("missing", tmp_path) == {EVERY_GROUP}
    assert experiment_groups("bad", tmp_path) == {EVERY_GROUP}
    assert EVERY_GROUP in experiment_groups("loop", tmp_path)
    assert main(["hybrid"]) == 0 and capsys.readouterr().out == "decode model train\n"


def test_the_feature_set_an_experiment_picks_is_what_hydra_composes(capsys):
    """run.sh asks which features an experiment trains on (scripts/recipe.sh, features_from_sat)."""
    for path in sorted((Path(CONF_DIR) / "experiment").glob("*.yaml")):
        composed = load_config(["data=mini", f"experiment={path.stem}"], check=False).features.name
        assert experiment_choice(path.stem, "features") in (composed, ""), path.stem
        if experiment_choice(path.stem, "features") == "":
            assert composed == load_config(["data=mini"], check=False).features.name, path.stem
    assert experiment_choice("hybrid_sat", "features") == "sat40"
    assert experiment_choice("swb300_hybrid_adpsgd", "features") == "sat40_ivector100_logmel40_deltas"
    assert main(["swb300_ssgd", "--choice", "features"]) == 0
    assert capsys.readouterr().out == "fmllr40_ivector100_logmel40_deltas\n"
