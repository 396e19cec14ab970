"""`python -m asr.sweep.diagnose`: targeted runs that change one candidate cause of ADPSGD's lag
behind SSGD at a time (asr/sweep/diagnose/diagnostics.py), written to
<sweep.out_dir>/diagnostics.{json,md}."""

import logging
from pathlib import Path

from asr.stage import stage_main

log = logging.getLogger("asr.sweep")


@stage_main(
    "sweep",
    groups=["sweep"],
    uses=["data", "features", "tokenizer", "model", "train"],
    reads="the features of the training and dev sets; sweep.out_dir/sweep.json (the sweep's baseline)",
    writes="sweep.out_dir/diagnostics.json, diagnostics.md",
)
def main(cfg) -> None:
    from asr.sweep.diagnose.diagnostics import run_diagnostics  # here, not above: --help answers without torch
    from asr.sweep.run import start_process

    start_process(cfg.train.threads)
    run_diagnostics(cfg)
    path = Path(cfg.sweep.out_dir) / "diagnostics.md"
    log.info("diagnostics: %s\n%s", path, path.read_text())


if __name__ == "__main__":
    main()
