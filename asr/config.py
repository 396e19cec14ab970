"""Hydra configuration: the structured schema of every group and the stage entry point.

Every stage (`python -m asr.<stage>`) loads the same primary config, `conf/config.yaml`, so
the recipe can pass one list of overrides to all stages and each experiment's saved config
is the whole picture. Group files under `conf/<group>/` are validated against the
dataclasses below; required paths are `???`.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from asr.data.config import DataConfig, SynthConfig
from asr.decode.config import DecodeConfig
from asr.distributed.config import DistributedConfig
from asr.features.config import FeaturesConfig
from asr.lm.config import LMConfig
from asr.models.config import ModelConfig
from asr.score.config import ScoreConfig
from asr.sweep.config import SweepConfig
from asr.text.config import TokenizerConfig
from asr.train.config import TrainConfig
from asr.utils.errors import InputError
from asr.utils.log import rank, setup_logging

CONF_DIR = os.environ.get("ASR_CONF_DIR", str(Path(__file__).resolve().parent.parent / "conf"))


@dataclass
class AsrConfig:
    data: DataConfig = MISSING
    synth: SynthConfig = field(default_factory=SynthConfig)
    features: FeaturesConfig = MISSING
    tokenizer: TokenizerConfig = MISSING
    lm: LMConfig = MISSING
    model: ModelConfig = MISSING
    train: TrainConfig = MISSING
    distributed: DistributedConfig = MISSING
    decode: DecodeConfig = MISSING
    score: ScoreConfig = MISSING
    sweep: SweepConfig = MISSING
    exp_name: str = "default"
    exp_dir: str = "exp/${exp_name}"
    seed: int = 1
    device: str = "auto"  # auto | cpu | cuda


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="asr_schema", node=AsrConfig)


_current_stage = "asr"


def _hydra_subdir(exp_dir: str) -> str | None:
    """Where Hydra saves config.yaml/overrides.yaml: per stage in the experiment dir, rank 0 only."""
    if rank() != 0:
        return None
    return str(Path(exp_dir) / ".hydra" / _current_stage)


OmegaConf.register_new_resolver("asr_hydra_subdir", _hydra_subdir, replace=True)
register_configs()


def stage_main(stage: str) -> Callable[[Callable[[DictConfig], Any]], Callable[[], None]]:
    """Decorator for a stage entry point: Hydra config, logging, clean errors.

    `InputError` (bad input the user can fix) becomes a clear message and exit status 2.
    """

    def decorate(run: Callable[[DictConfig], Any]) -> Callable[[], None]:
        @functools.wraps(run)
        def task(cfg: DictConfig) -> None:
            log = setup_logging(stage, Path(cfg.exp_dir) / "log")
            log.info("stage %s: %s", stage, " ".join(sys.argv[1:]) or "(no overrides)")
            try:
                run(cfg)
            except InputError as err:
                log.error("%s", err)
                sys.exit(2)

        def main() -> None:
            global _current_stage
            _current_stage = stage
            hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")(task)()

        return main

    return decorate


def load_config(overrides: list[str] | None = None) -> DictConfig:
    """Compose the config without running a job (for tests and notebooks)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=overrides or [])


def to_container(cfg: DictConfig) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


logging.getLogger("asr").addHandler(logging.NullHandler())
