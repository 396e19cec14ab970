"""The config groups an `experiment=NAME` override sets, for run.sh: a stage that reads none of
them is not made to run again by it (scripts/recipe.sh, `stage_options`).

    python -m asr.utils.experiment_groups NAME     # e.g. hybrid -> decode model train
    python -m asr.utils.experiment_groups NAME --choice features   # e.g. hybrid_sat -> sat40

An experiment (conf/experiment/NAME.yaml, `# @package _global_`) sets the top-level keys it
writes and the groups its defaults list overrides (`override /decode: wfst` -> decode), and
those of the experiments it names in that list (`- swb300_ssgd`). Only PyYAML, not Hydra, so
that run.sh asks in a few tens of milliseconds; an experiment that cannot be read prints `*`
(every group: Hydra then names the problem when the first stage loads the config).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

CONF_DIR = os.environ.get("ASR_CONF_DIR", str(Path(__file__).resolve().parents[2] / "conf"))
EVERY_GROUP = "*"


def read_experiment(name: str, conf_dir: str | Path, seen: frozenset[str]) -> dict | None:
    """conf/experiment/NAME.yaml as a dict; None when it cannot be read or includes itself."""
    path = Path(conf_dir) / "experiment" / f"{name}.yaml"
    try:
        node = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    return node if isinstance(node, dict) and name not in seen else None


def override_group(key: str) -> str:
    """The group a defaults-list key names: `override /decode` -> decode."""
    return key.removeprefix("override").strip().lstrip("/")


def experiment_groups(name: str, conf_dir: str | Path = CONF_DIR, seen: frozenset[str] = frozenset()) -> set[str]:
    node = read_experiment(name, conf_dir, seen)
    if node is None:
        return {EVERY_GROUP}
    groups = {key for key in node if key != "defaults"}
    for entry in node.get("defaults") or []:
        groups |= default_groups(entry, conf_dir, seen | {name})
    return groups


def default_groups(entry, conf_dir: str | Path, seen: frozenset[str]) -> set[str]:
    """What one entry of an experiment's defaults list sets."""
    if entry == "_self_":
        return set()
    if isinstance(entry, str):  # another experiment of the same group
        return experiment_groups(entry, conf_dir, seen)
    if isinstance(entry, dict):
        return {override_group(key).split("/")[0] for key in entry}
    return {EVERY_GROUP}


def experiment_choice(
    name: str, group: str, conf_dir: str | Path = CONF_DIR, seen: frozenset[str] = frozenset()
) -> str:
    """The option an experiment picks for a config group (`override /features: sat40` -> sat40), its
    own or an included experiment's, the last in its defaults list winning as in Hydra; "" if none."""
    node = read_experiment(name, conf_dir, seen)
    choice = ""
    for entry in (node or {}).get("defaults") or []:
        if isinstance(entry, str) and entry != "_self_":
            choice = experiment_choice(entry, group, conf_dir, seen | {name}) or choice
        elif isinstance(entry, dict):
            choice = next((str(v) for k, v in entry.items() if override_group(k) == group), choice)
    return choice


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.utils.experiment_groups", description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the experiment: conf/experiment/NAME.yaml")
    parser.add_argument("--choice", metavar="GROUP", help="print the option it picks for GROUP instead")
    args = parser.parse_args(argv)
    if args.choice:
        print(experiment_choice(args.name, args.choice))
    else:
        print(" ".join(sorted(experiment_groups(args.name))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
