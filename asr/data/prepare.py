"""The prepare stage: LDC corpora -> Kaldi data dirs `<data_dir>/{train_set,dev_set,eval_set}`.

    python -m asr.data.prepare [hydra overrides]      e.g. data.prepare_sets=[eval]

Both corpora are checked before any work starts, so one run lists every missing path. The
first `data.dev_utts` Switchboard utterances (sorted by id, so whole conversation sides)
form the dev set and the rest the training set, as Kaldi's `subset_data_dir.sh --first`
makes train_dev. Each data dir gets utt2dur (segment lengths) and is validated, audio
included, before it is renamed into place.
"""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from asr.config import stage_main
from asr.data.datadir import DataDir, write_data_dir
from asr.data.hub5 import LAYOUT as EVAL2000_LAYOUT
from asr.data.hub5 import missing_eval2000_inputs, prepare_eval2000
from asr.data.swbd import LAYOUT as SWBD_LAYOUT
from asr.data.swbd import missing_swbd_inputs, prepare_swbd
from asr.data.validate import validate_data_dir
from asr.utils.atomic import atomic_dir
from asr.utils.errors import InputError

log = logging.getLogger("asr.data.prepare")  # not __main__ when run with -m

KNOWN_SETS = ("train", "dev", "eval")
MAX_PROBLEMS_SHOWN = 20


def requested_sets(cfg: DictConfig) -> list[str]:
    sets = list(cfg.prepare_sets)
    unknown = [s for s in sets if s not in KNOWN_SETS]
    if unknown or not sets:
        raise InputError(f"data.prepare_sets={sets}: choose among {list(KNOWN_SETS)}")
    return sets


def _required_paths(cfg: DictConfig, keys: tuple[str, ...]) -> list[str]:
    """`???` corpus locations, named as the override that sets them."""
    return [f"data.{key}: required (pass data.{key}=/path/to/corpus)" for key in keys if OmegaConf.is_missing(cfg, key)]


def preflight(cfg: DictConfig, sets: list[str]) -> None:
    """Check every corpus input the requested sets need; one InputError lists all that is missing."""
    missing, layouts = [], []
    if {"train", "dev"} & set(sets):
        unset = _required_paths(cfg, ("swbd_dir", "ms98_dir"))
        swbd_missing = unset or missing_swbd_inputs(cfg.swbd_dir, cfg.ms98_dir)
        missing += swbd_missing
        layouts += [SWBD_LAYOUT] if swbd_missing else []
    if "eval" in sets:
        unset = _required_paths(cfg, ("eval2000_dir", "eval2000_text_dir"))
        eval_missing = unset or missing_eval2000_inputs(cfg.eval2000_dir, cfg.eval2000_text_dir)
        missing += eval_missing
        layouts += [EVAL2000_LAYOUT] if eval_missing else []
    if missing:
        raise InputError("corpus inputs missing; fix the data.* paths:\n  " + "\n  ".join(missing) + "\n" + "\n".join(layouts))


def with_utt2dur(d: DataDir) -> DataDir:
    """Durations from the segment times (Kaldi's get_utt2dur.sh does the same with segments)."""
    d.utt2dur = {utt: round(seg.end - seg.start, 3) for utt, seg in d.segments.items()}
    return d


def split_dev(d: DataDir, dev_utts: int) -> tuple[DataDir, DataDir]:
    """(train, dev): dev is the first `dev_utts` utterances in sorted order, train the rest."""
    utts = d.utts
    if not 0 < dev_utts < len(utts):
        n = len(utts)
        raise InputError(f"data.dev_utts={dev_utts} but Switchboard has {n} utterances; choose 0 < dev_utts < {n}")
    return d.subset(utts[dev_utts:]), d.subset(utts[:dev_utts])


def describe(d: DataDir) -> str:
    hours = sum(d.utt2dur.values()) / 3600
    return f"{len(d.utt2spk)} utterances, {len(d.spk2utt)} speakers, {hours:.3f} hours"


def write_validated(d: DataDir, path: Path) -> None:
    """Write, validate the written files, and only then rename them to `path`."""
    with atomic_dir(path) as tmp:
        write_data_dir(d, tmp)
        problems = validate_data_dir(tmp)
        if problems:
            shown = "\n  ".join(str(p).replace(str(tmp), str(path)) for p in problems[:MAX_PROBLEMS_SHOWN])
            raise InputError(f"{path}: the prepared data dir has {len(problems)} problems, not written:\n  {shown}")
    log.info("%s: %s", path, describe(d))


def prepare_data(cfg: DictConfig) -> dict[str, Path]:
    """Write the requested data dirs; returns set role -> data dir."""
    sets = requested_sets(cfg)
    preflight(cfg, sets)
    data_dir = Path(cfg.data_dir)
    written = {}
    if {"train", "dev"} & set(sets):
        swbd = with_utt2dur(prepare_swbd(cfg.swbd_dir, cfg.ms98_dir, cfg.expected_sph_files))
        train, dev = split_dev(swbd, cfg.dev_utts)
        for role, name, d in (("train", cfg.train_set, train), ("dev", cfg.dev_set, dev)):
            if role in sets:
                write_validated(d, data_dir / name)
                written[role] = data_dir / name
    if "eval" in sets:
        evaluation = with_utt2dur(prepare_eval2000(cfg.eval2000_dir, cfg.eval2000_text_dir))
        write_validated(evaluation, data_dir / cfg.eval_set)
        written["eval"] = data_dir / cfg.eval_set
    return written


@stage_main("prepare")
def main(cfg: DictConfig) -> None:
    prepare_data(cfg.data)


if __name__ == "__main__":
    main()
