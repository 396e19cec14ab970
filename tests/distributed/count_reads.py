"""`torchrun ... -m tests.distributed.count_reads OUT_DIR OVERRIDES...`: asr.train with the host
reads of every step counted (tests/fixtures/host_reads.py); each learner writes
OUT_DIR/reads.<rank>.json: {"per_step": [[read, ...], ...], "sums": [steps before each sum]}."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from asr.config import load_config
from asr.train import loop
from tests.fixtures.host_reads import count_host_reads


def main() -> None:
    out, overrides = Path(sys.argv[1]), sys.argv[2:]
    per_step, sums = count_host_reads()
    loop.train(load_config(overrides))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"reads.{os.environ.get('RANK', '0')}.json").write_text(json.dumps({"per_step": per_step, "sums": sums}))


if __name__ == "__main__":
    main()
