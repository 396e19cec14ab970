"""`python -m asr.sweep`: SSGD vs ADPSGD held-out loss at several global batch sizes
(simulated learners), written to <sweep.out_dir>/sweep.{json,md,png}."""

import logging
from pathlib import Path

import torch

from asr.stage import stage_main
from asr.sweep.report import write_report
from asr.sweep.run import run_sweep

log = logging.getLogger("asr.sweep")


@stage_main("sweep")
def main(cfg) -> None:
    torch.set_num_threads(cfg.train.threads)
    results = run_sweep(cfg)
    out_dir = Path(cfg.sweep.out_dir)
    write_report(results, out_dir)
    log.info("sweep: %s\n%s", out_dir / "sweep.md", (out_dir / "sweep.md").read_text())


if __name__ == "__main__":
    main()
