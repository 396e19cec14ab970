"""What a feature model or a set of the fMLLR and i-vector recipes was made from, kept in the
stage record (asr/utils/record.py) that is written last into the directory (built under a
temporary name and renamed when complete), so that a re-run skips it only when its inputs and
options are unchanged, and readers verify its files. A model's record names its options and
its log-mel set's own records (`source_files`); a set's names one checksum of everything it
depends on (`recipe_checksum`: options, the model's and the log-mel's checksums)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from asr.utils.errors import InputError
from asr.utils.record import outputs_of, read_record, record_path, why_rerun, write_record

SOURCE_FILES = ("fbank.conf", "data_checksum", "cmvn_type")  # a log-mel set's own records of its inputs
MODEL_STAGE = "features"
RERUN = "python -m asr.features"


def checksum(*parts: Any) -> str:
    digest = hashlib.sha1()
    for part in parts:
        digest.update(json.dumps(part, sort_keys=True, default=str).encode() + b"\0")
    return digest.hexdigest() + "\n"


def source_checksum(base_dir: Path) -> str:
    """What a log-mel set was made from (its own records)."""
    return "".join((base_dir / f).read_text() for f in SOURCE_FILES)


def source_files(base_dir: Path) -> list[Path]:
    """A log-mel set's records of its inputs, as a feature model's stage-record inputs."""
    return [base_dir / f for f in SOURCE_FILES]


def why_incomplete(out_dir: Path, expected: str) -> str | None:
    """None when `out_dir`'s record says it is complete and made from inputs with checksum
    `expected`; else why it must be made (again)."""
    return why_rerun(out_dir, MODEL_STAGE, {"recipe_checksum": expected}, [])


def seal(tmp: Path, expected: str) -> None:
    """Record a set just written into `tmp` (every file in it) as made from `expected`."""
    write_record(tmp, MODEL_STAGE, RERUN, {"recipe_checksum": expected}, [], outputs_of(tmp))


def recorded_checksum(out_dir: Path) -> str:
    """The checksum a complete set's record names (what the sets built on it depend on)."""
    record = read_record(record_path(out_dir, MODEL_STAGE))
    if record is None or "recipe_checksum" not in record["options"]:
        raise InputError(f"{out_dir}: no record of a finished features stage; re-run it ({RERUN})")
    return record["options"]["recipe_checksum"]


def plain(cfg: Any) -> dict:
    """A config node (OmegaConf or dataclass) as plain values."""
    return OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else asdict(cfg)
