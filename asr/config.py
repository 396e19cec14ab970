"""Hydra configuration: the structured schema of every group, composed and checked
(asr/stage.py runs a stage with it).

Every stage (`python -m asr.<stage>`) loads the same primary config, `conf/config.yaml`, so
the recipe can pass one list of overrides to all stages and each experiment's saved config
is the whole picture. Group files under `conf/<group>/` are validated against the
dataclasses below; required paths are `???`.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf

from asr.average.config import AverageConfig
from asr.data.config import DataConfig, SynthConfig
from asr.decode.config import DecodeConfig
from asr.distributed.config import DistributedConfig
from asr.features.config import FeaturesConfig
from asr.gmm.config import GmmConfig
from asr.lang.config import LangConfig
from asr.lm.config import LMConfig
from asr.models.config import ModelConfig
from asr.score.config import ScoreConfig
from asr.sweep.config import SweepConfig
from asr.text.config import TokenizerConfig
from asr.train.config import TrainConfig
from asr.utils.checks import Check, device_name
from asr.utils.errors import InputError
from asr.utils.experiment_groups import CONF_DIR
from asr.utils.log import rank


@dataclass
class AsrConfig:
    data: DataConfig = MISSING
    synth: SynthConfig = field(default_factory=SynthConfig)
    features: FeaturesConfig = MISSING
    tokenizer: TokenizerConfig = MISSING
    lm: LMConfig = MISSING
    lang: LangConfig = MISSING
    model: ModelConfig = MISSING
    train: TrainConfig = MISSING
    distributed: DistributedConfig = MISSING
    decode: DecodeConfig = MISSING
    score: ScoreConfig = MISSING
    sweep: SweepConfig = MISSING
    average: AverageConfig = MISSING
    gmm: GmmConfig = MISSING
    exp_name: str = "default"
    exp_dir: str = "exp/${exp_name}"
    seed: int = 1
    device: str = "auto"  # auto | cpu | cuda | cuda:N

    CHECKS: ClassVar[dict[str, Check]] = {"device": device_name}


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="asr_schema", node=AsrConfig)


current_stage = "asr"  # set by the stage runner (asr/stage.py) before Hydra composes


def _hydra_subdir(exp_dir: str) -> str | None:
    """Where Hydra saves config.yaml/overrides.yaml: per stage in the experiment dir, rank 0 only."""
    if rank() != 0:
        return None
    return str(Path(exp_dir) / ".hydra" / current_stage)


OmegaConf.register_new_resolver("asr_hydra_subdir", _hydra_subdir, replace=True)
register_configs()


# --- checking the composed config against the schema ------------------------------------


def _dataclass_of(node: DictConfig) -> type | None:
    kind = OmegaConf.get_type(node)
    return kind if dataclasses.is_dataclass(kind) else None


def _unknown_key_problem(path: str, key: str, known: list[str], schema: type) -> str:
    key_path = f"{path}.{key}" if path else key
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {path + '.' if path else ''}{close[0]}?" if close else ""
    module = schema.__module__.replace(".", "/") + ".py"
    return f"{key_path}: unknown key (not in {schema.__name__}, {module}){hint}"


def _value_problem(node: DictConfig, key: str, path: str, check) -> str | None:
    if OmegaConf.is_missing(node, key):
        return None  # required values are reported by the stage that needs them, with the layout
    try:
        value = node[key]
    except Exception as err:  # a broken ${...} interpolation
        return f"{path}: cannot be resolved ({err})"
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value, resolve=True)
    try:
        problem = check(value)
    except TypeError:
        problem = "not a value of the expected kind"
    return f"{path}={value!r}: {problem}" if problem else None


def _schema_problems(node: DictConfig, path: str) -> list[str]:
    """Unknown keys (added with +) and values the dataclass' CHECKS refuse, nested groups included."""
    schema = _dataclass_of(node)
    if schema is None:
        return []
    fields = {f.name: f for f in dataclasses.fields(schema)}
    problems = []
    for key in node.keys():
        if key not in fields:
            problems.append(_unknown_key_problem(path, str(key), list(fields), schema))
            continue
        child = OmegaConf.select(node, str(key), throw_on_resolution_failure=False)
        if isinstance(child, DictConfig):
            problems += _schema_problems(child, f"{path}.{key}" if path else str(key))
    for key, check in getattr(schema, "CHECKS", {}).items():
        if key in node:
            problem = _value_problem(node, key, f"{path}.{key}" if path else key, check)
            if problem:
                problems.append(problem)
    return problems


def check_config(cfg: DictConfig) -> None:
    """Every problem of the composed config in one InputError, one line each, naming the option.

    Runs before any stage work: a value no stage can use (train.lr=-1, model.hidden_size=0)
    or a key no stage reads (+train.epochz=1, which Hydra's `+` adds without complaint)
    would otherwise fail late, with a traceback, or not at all.
    """
    problems = _schema_problems(cfg, "")
    if len(problems) == 1:
        raise InputError(f"invalid config: {problems[0]}")
    if problems:
        raise InputError(f"invalid config, {len(problems)} problems:\n  " + "\n  ".join(problems))


def load_config(overrides: list[str] | None = None, check: bool = True) -> DictConfig:
    """Compose the config without running a job (for tests and notebooks), checked as the
    stages check it unless check=False."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides or [])
    if check:
        check_config(cfg)
    return cfg


logging.getLogger("asr").addHandler(logging.NullHandler())
