"""The stage runner: every `python -m asr.<stage>` entry point is a function of the composed
config wrapped by `stage_main`, which gives it Hydra's config (conf/config.yaml with the
command line's overrides, checked against the schema), a log file, and clean errors.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any, Callable

import hydra
from omegaconf import DictConfig

from asr import config
from asr.data import commands as command_policy
from asr.utils.atomic import NO_SPACE, disk_full_message
from asr.utils.errors import InputError
from asr.utils.log import setup_logging
from asr.utils.memory import limit_kernel_cache
from asr.utils.stop import EXIT_PREEMPTED, Preempted, Terminated, terminate_on_signal


def stage_main(stage: str) -> Callable[[Callable[[DictConfig], Any]], Callable[[], None]]:
    """Decorator for a stage entry point: Hydra config, logging, clean errors.

    The composed config is checked against the schema first (check_config), and oneDNN's
    kernel cache is bounded before any model runs (asr.utils.memory). `InputError` (bad
    input the user can fix), a full disk and overrides Hydra cannot compose become a clear
    message and exit status 2. SIGTERM/SIGUSR1 stop a stage with exit EXIT_PREEMPTED (75): the
    train stage after saving a checkpoint (asr.train.loop), the others at once, their atomic
    writes in progress removed (asr.utils.stop): run the same command again to go on.
    """

    def decorate(run: Callable[[DictConfig], Any]) -> Callable[[], None]:
        started = False

        @functools.wraps(run)
        def task(cfg: DictConfig) -> None:
            nonlocal started
            started = True
            log = setup_logging(stage, Path(cfg.exp_dir) / "log")
            log.info("stage %s: %s", stage, " ".join(sys.argv[1:]) or "(no overrides)")
            limit_kernel_cache()
            if stage != "train":  # training stops at a step boundary instead (asr/train/loop.py)
                terminate_on_signal()
            try:
                config.check_config(cfg)
                command_policy.configure(cfg.data.run_commands)
                run(cfg)
            except InputError as err:
                log.error("%s", err)
                sys.exit(2)
            except Preempted as stopped:
                log.warning("%s (exit %d)", stopped, EXIT_PREEMPTED)
                sys.exit(EXIT_PREEMPTED)
            except Terminated as signalled:
                log.warning("stage %s stopped by %s; nothing half-written is kept, run the same command again (exit %d)",
                            stage, signalled, EXIT_PREEMPTED)
                sys.exit(EXIT_PREEMPTED)
            except OSError as err:
                if err.errno not in NO_SPACE:
                    raise
                log.error("%s", disk_full_message(err))
                sys.exit(2)

        def main() -> None:
            config.current_stage = stage
            try:
                hydra.main(config_path=config.CONF_DIR, config_name="config", version_base="1.3")(task)()
            except SystemExit as end:
                # Hydra exits 1 when the overrides do not compose (an unknown key without +, a
                # bad value type, a missing config file): a user error, like InputError's 2.
                if end.code == 1 and not started:
                    sys.exit(2)
                raise

        return main

    return decorate
