"""What a feature model or set directory was made from, so that a re-run skips it only when
its inputs and options are unchanged: a checksum of them in the directory's
`recipe_checksum`, written last (the directory is built under a temporary name and renamed
when complete)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

CHECKSUM_FILE = "recipe_checksum"


def checksum(*parts: Any) -> str:
    digest = hashlib.sha1()
    for part in parts:
        digest.update(json.dumps(part, sort_keys=True, default=str).encode() + b"\0")
    return digest.hexdigest() + "\n"


def source_checksum(base_dir: Path) -> str:
    """What a log-mel set was made from (its own records)."""
    return "".join((base_dir / f).read_text() for f in ("fbank.conf", "data_checksum", "cmvn_type"))


def complete(out_dir: Path, outputs: tuple[str, ...], expected: str) -> bool:
    """True when `out_dir` has all `outputs` and was made from inputs with checksum `expected`."""
    return (
        out_dir.is_dir()
        and all((out_dir / f).is_file() for f in outputs)
        and (out_dir / CHECKSUM_FILE).read_text() == expected
    )


def plain(cfg: Any) -> dict:
    """A config node (OmegaConf or dataclass) as plain values."""
    return OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else asdict(cfg)
