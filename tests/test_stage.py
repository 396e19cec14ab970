import os
import sys
from pathlib import Path

from asr.stage import stage_main
from asr.utils.memory import KERNEL_CACHE_VARIABLE, KERNEL_CACHE_CAPACITY


def test_a_stage_runs_with_oneDNNs_kernel_cache_bounded(tmp_path, monkeypatch):
    monkeypatch.setenv(KERNEL_CACHE_VARIABLE, "unset")  # recorded, so that the stage's setting is undone
    monkeypatch.delenv(KERNEL_CACHE_VARIABLE)
    monkeypatch.setattr(sys, "argv", ["asr.example", f"exp_dir={tmp_path / 'exp'}"])
    seen = []
    stage_main("example")(lambda cfg: seen.append(os.environ.get(KERNEL_CACHE_VARIABLE)))()
    assert seen == [str(KERNEL_CACHE_CAPACITY)]


def run_counting_composes(monkeypatch, argv: list[str]) -> tuple[int, list]:
    from hydra._internal.hydra import Hydra

    composes = []
    compose = Hydra.compose_config

    def counting(self, *args, **kwargs):
        composes.append(kwargs.get("run_mode"))
        return compose(self, *args, **kwargs)

    monkeypatch.setattr(Hydra, "compose_config", counting)
    monkeypatch.setattr(sys, "argv", ["asr.example", *argv])
    ran = []
    stage_main("example")(lambda cfg: ran.append(cfg.exp_dir))()
    return len(ran), composes


def test_a_stage_composes_its_config_once(tmp_path, monkeypatch):
    from hydra.types import RunMode

    ran, composes = run_counting_composes(monkeypatch, [f"exp_dir={tmp_path / 'exp'}"])
    assert ran == 1 and composes == [RunMode.RUN]  # Hydra 1.3 alone composes twice (get_mode, then run)
    assert (tmp_path / "exp/.hydra/example/config.yaml").is_file()  # Hydra's job set-up as before


def test_hydra_mode_set_on_the_command_line_is_still_read(tmp_path, monkeypatch):
    from hydra.types import RunMode

    ran, composes = run_counting_composes(monkeypatch, [f"exp_dir={tmp_path / 'exp'}", "hydra.mode=RUN"])
    assert ran == 1 and composes == [RunMode.MULTIRUN, RunMode.RUN]  # get_mode's compose, then the run's


def test_the_shipped_config_sets_no_hydra_mode(monkeypatch):
    """What lets a stage skip Hydra's get_mode: composed as get_mode composes it, conf/ and every
    experiment preset leave `hydra.mode` unset, so get_mode would answer None (a plain run)."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from asr import config

    experiments = sorted(p.stem for p in (Path(config.CONF_DIR) / "experiment").glob("*.yaml"))
    assert experiments
    GlobalHydra.instance().clear()
    try:
        hydra = Hydra.create_main_hydra2("asr", create_config_search_path(config.CONF_DIR))
        for experiment in [None, *experiments]:
            overrides = [f"experiment={experiment}"] if experiment else []
            cfg = hydra.compose_config(  # as get_mode composes it, which hides a failure as None
                "config", overrides, run_mode=RunMode.MULTIRUN, with_log_configuration=False,
                validate_sweep_overrides=False,
            )  # fmt: skip
            assert cfg.hydra.mode is None, experiment
    finally:
        GlobalHydra.instance().clear()
