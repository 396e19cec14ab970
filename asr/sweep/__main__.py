"""`python -m asr.sweep`: held-out loss against the lr and the global batch for SSGD, ADPSGD
(and its variants) and H-ADPSGD with simulated learners, the largest lr and the largest batch
each converges at, written to <sweep.out_dir>/sweep.{json,md,png}."""

import logging
from pathlib import Path

from asr.stage import stage_main

log = logging.getLogger("asr.sweep")


@stage_main(
    "sweep",
    groups=["sweep"],
    uses=["data", "features", "tokenizer", "model", "train"],
    reads="the features of the training and dev sets, the tokenizer",
    writes="sweep.out_dir/sweep.json, sweep.md, sweep.png",
)
def main(cfg) -> None:
    from asr.sweep.report import write_report  # here, not above: --help answers without importing torch
    from asr.sweep.run import start_process
    from asr.sweep.sweep import run_sweep

    start_process(cfg.train.threads)
    result = run_sweep(cfg)
    out_dir = Path(cfg.sweep.out_dir)
    write_report(result, out_dir)
    log.info("sweep: %s\n%s", out_dir / "sweep.md", (out_dir / "sweep.md").read_text())


if __name__ == "__main__":
    main()
