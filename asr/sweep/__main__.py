"""`python -m asr.sweep`: held-out loss against the lr and the global batch for SSGD, ADPSGD
(and its variants) and H-ADPSGD with simulated learners, the largest lr and the largest batch
each converges at, written to <sweep.out_dir>/sweep.{json,md,png}."""

import logging
from pathlib import Path

import torch

from asr.stage import stage_main
from asr.sweep.report import write_report
from asr.sweep.sweep import run_sweep

log = logging.getLogger("asr.sweep")


@stage_main("sweep")
def main(cfg) -> None:
    torch.set_num_threads(cfg.train.threads)
    result = run_sweep(cfg)
    out_dir = Path(cfg.sweep.out_dir)
    write_report(result, out_dir)
    log.info("sweep: %s\n%s", out_dir / "sweep.md", (out_dir / "sweep.md").read_text())


if __name__ == "__main__":
    main()
