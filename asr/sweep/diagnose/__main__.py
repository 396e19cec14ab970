"""`python -m asr.sweep.diagnose`: targeted runs that change one candidate cause of ADPSGD's lag
behind SSGD at a time (asr/sweep/diagnose/diagnostics.py), written to
<sweep.out_dir>/diagnostics.{json,md}."""

import logging
from pathlib import Path

from asr.stage import stage_main
from asr.utils.memory import freeze_imports

log = logging.getLogger("asr.sweep")


@stage_main(
    "sweep",
    groups=["sweep"],
    uses=["data", "features", "tokenizer", "model", "train"],
    reads="the features of the training and dev sets; sweep.out_dir/sweep.json (the sweep's baseline)",
    writes="sweep.out_dir/diagnostics.json, diagnostics.md",
)
def main(cfg) -> None:
    import torch  # here, not above: --help answers without importing torch

    from asr.sweep.diagnose.diagnostics import run_diagnostics

    freeze_imports()
    torch.set_num_threads(cfg.train.threads)
    run_diagnostics(cfg)
    path = Path(cfg.sweep.out_dir) / "diagnostics.md"
    log.info("diagnostics: %s\n%s", path, path.read_text())


if __name__ == "__main__":
    main()
