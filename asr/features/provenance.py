"""What a model or a set of the fMLLR and i-vector recipes is made from, kept in the stage
record (asr/utils/record.py) written last into its directory (built under a temporary name and
renamed when complete), so that a re-run skips it by the one rule of `why_rerun` and readers
verify its files. Its options are the config values that change it; its inputs are files: the
log-mel set's own records of what that set was made from (`source_files`) and the stage
records of the model and the sets it was made with (`made_with`). A model trained again
rewrites its record, so the sets made with it run again."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from asr.utils.record import outputs_of, record_path, why_rerun, write_record

SOURCE_FILES = ("fbank.conf", "data_checksum", "cmvn_type")  # a log-mel set's own records of its inputs
MODEL_STAGE = "features"
RERUN = "python -m asr.features"


def source_files(base_dir: Path) -> list[Path]:
    """A log-mel set's records of its inputs."""
    return [base_dir / f for f in SOURCE_FILES]


def made_with(*dirs: Path | None) -> list[Path]:
    """The stage records of the models and sets in `dirs` (None: not used), as inputs."""
    return [record_path(d, MODEL_STAGE) for d in dirs if d is not None]


def why_incomplete(out_dir: Path, options: dict, inputs: list[Path], force: bool) -> str | None:
    """None when `out_dir`'s record says it is complete and made with `options` from `inputs`
    as they are now; else why it must be made (again)."""
    return "features.force=true" if force else why_rerun(out_dir, MODEL_STAGE, options, inputs)


def seal(tmp: Path, options: dict, inputs: list[Path]) -> None:
    """Record a model or set just written into `tmp` (every file in it)."""
    write_record(tmp, MODEL_STAGE, RERUN, options, inputs, outputs_of(tmp))


def plain(cfg: Any) -> dict:
    """A config node (OmegaConf or dataclass) as plain values."""
    return OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else asdict(cfg)
