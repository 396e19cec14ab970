"""The prepare stage: LDC corpora -> Kaldi data dirs `<data_dir>/{train_set,dev_set,eval_set}`.

    python -m asr.data.prepare [hydra overrides]      e.g. data.prepare_sets=[eval]

Every corpus the requested sets need is checked before any work starts, so one run lists
every missing path. As Kaldi's swbd/s5c and fisher_swbd/s5 recipes do:

  * dev: the first `data.dev_utts` Switchboard utterances (sorted by id, so whole
    conversation sides), Kaldi's train_dev;
  * train: the rest of Switchboard (train_nodev), plus all of Fisher when `data.fisher_dirs`
    is set (SWB-2000), with repeated transcripts capped at `data.max_duplicates` (train_nodup);
  * eval: Hub5-2000 with its stm and GLM.

Each data dir gets utt2dur (segment lengths) and is validated, audio included, before it is
renamed into place. Unreadable recordings are dropped with their utterances and named; more
than `data.max_unreadable` of a corpus' recordings unreadable stops the stage. With
`data.lm_text` set, the training transcripts before the duplicate cap (Switchboard train_nodev
and Fisher, as fisher_swbd's LM text) are written there too.

Each data dir, once in place, gets its stage record `<set>/prepare.record.json`
(asr/utils/record.py): the data options that set depends on and the corpus text files it is
made from (MS98 and Fisher transcripts; Hub5's pem, stm and glm), not the audio, which wav.scp
names by path. A set whose record matches is not prepared again. The record lists no outputs:
a data dir is the user's to edit (by hand, or `python -m asr.data.fix`), and an edited table
must reach the stages that read it, not be prepared over; a deleted data dir takes its record
with it, so it is prepared again.

Memory does not grow with the corpus: Switchboard and Fisher are read one conversation side at
a time into a temporary file (asr.data.prepare.spool), which each data dir is then written
from line by line; only what is per recording or speaker (and a count per distinct transcript,
for the duplicate cap) is held. Hub5-2000, a fixed 4,466 utterances, is prepared in memory.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Iterable

from omegaconf import DictConfig, OmegaConf

from asr.data.datadir import (
    DataDir,
    StreamedDataDir,
    Tally,
    Utterance,
    combine_streamed,
    streamed,
    tally,
    write_streamed,
)
from asr.data.fisher import LAYOUT as FISHER_LAYOUT
from asr.data.fisher import find_fisher_folders, find_fisher_transcripts, fisher_corpus, missing_fisher_inputs
from asr.data.hub5 import GLM, PEM, STM, missing_eval2000_inputs, prepare_eval2000, speech_dir, text_dir
from asr.data.hub5 import LAYOUT as EVAL2000_LAYOUT
from asr.data.prepare.spool import Spool
from asr.data.swbd import LAYOUT as SWBD_LAYOUT
from asr.data.subsets import check_first, remove_duplicates
from asr.data.swbd import find_ms98_transcripts, missing_swbd_inputs, swbd_corpus
from asr.data.validate import validate_data_dir
from asr.utils.atomic import atomic_dir, atomic_open
from asr.utils.errors import InputError
from asr.utils.record import record_path, why_rerun, write_record

log = logging.getLogger("asr.data.prepare")  # not __main__ when run with -m

KNOWN_SETS = ("train", "dev", "eval")
MAX_PROBLEMS_SHOWN = 20
STAGE, RERUN = "prepare", "python -m asr.data.prepare"
SET_NAME_KEYS = {"train": "train_set", "dev": "dev_set", "eval": "eval_set"}
# The data options each set depends on (the expected file counts only warn; prepare_sets and
# the set names say which sets and where).
SET_OPTIONS = {
    "train": ("swbd_dir", "ms98_dir", "fisher_dirs", "missing_transcript", "dev_utts", "max_duplicates", "lm_text"),
    "dev": ("swbd_dir", "ms98_dir", "missing_transcript", "dev_utts"),
    "eval": ("eval2000_dir", "eval2000_text_dir"),
}


def requested_sets(cfg: DictConfig) -> list[str]:
    sets = list(cfg.prepare_sets)
    unknown = [s for s in sets if s not in KNOWN_SETS]
    if unknown or not sets:
        raise InputError(f"data.prepare_sets={sets}: choose among {list(KNOWN_SETS)}")
    return sets


def _required_paths(cfg: DictConfig, keys: tuple[str, ...]) -> list[str]:
    """`???` corpus locations, named as the recipe's option and the override that set them."""
    return [
        f"data.{key}: required (the recipe's --{key.replace('_', '-')} DIR, or data.{key}=/path/to/corpus)"
        for key in keys
        if OmegaConf.is_missing(cfg, key)
    ]


def _given(cfg: DictConfig, *keys: str) -> list[str | None]:
    """The corpus locations that are set; None for the `???` ones (reported as required)."""
    return [None if OmegaConf.is_missing(cfg, key) else cfg[key] for key in keys]


def preflight(cfg: DictConfig, sets: list[str]) -> None:
    """Check every corpus input the requested sets need; one InputError lists all that is missing."""
    missing, layouts = [], []
    if {"train", "dev"} & set(sets):
        swbd_missing = _required_paths(cfg, ("swbd_dir", "ms98_dir")) + missing_swbd_inputs(
            *_given(cfg, "swbd_dir", "ms98_dir")
        )
        missing += swbd_missing
        layouts += [SWBD_LAYOUT] if swbd_missing else []
    if "train" in sets and OmegaConf.is_missing(cfg, "fisher_dirs"):
        missing.append(
            "data.fisher_dirs: required for SWB-2000 (pass data.fisher_dirs=[dir,...] or the recipe's --fisher-dirs)"
        )
    elif "train" in sets and cfg.fisher_dirs:
        fisher_missing = missing_fisher_inputs(list(cfg.fisher_dirs))
        missing += fisher_missing
        layouts += [FISHER_LAYOUT] if fisher_missing else []
    if "eval" in sets:
        eval_missing = _required_paths(cfg, ("eval2000_dir", "eval2000_text_dir")) + missing_eval2000_inputs(
            *_given(cfg, "eval2000_dir", "eval2000_text_dir")
        )
        missing += eval_missing
        layouts += [EVAL2000_LAYOUT] if eval_missing else []
    if missing:
        raise InputError(
            "corpus inputs missing; fix the corpus paths:\n  " + "\n  ".join(missing) + "\n" + "\n".join(layouts)
        )


def with_utt2dur(d: DataDir) -> DataDir:
    """Durations from the segment times (Kaldi's get_utt2dur.sh does the same with segments)."""
    d.utt2dur = {utt: seg.duration for utt, seg in d.segments.items()}
    return d


def write_training_set(cfg: DictConfig, swbd_nodev: StreamedDataDir, path: Path) -> None:
    """Switchboard train_nodev, plus Fisher for SWB-2000, with repeated transcripts capped; and
    the transcripts before the cap for the LM."""
    with contextlib.ExitStack() as stack:
        full = swbd_nodev
        if cfg.fisher_dirs:
            fisher = stack.enter_context(
                Spool(
                    fisher_corpus(
                        list(cfg.fisher_dirs), cfg.expected_fisher_files, cfg.missing_transcript, cfg.max_unreadable
                    )
                )
            ).part()
            full = combine_streamed(fisher, swbd_nodev)
            log.info("train: Fisher (%s) + Switchboard (%s)", tally(fisher), tally(swbd_nodev))
        train = remove_duplicates(full, cfg.max_duplicates) if cfg.max_duplicates else full
        written = write_validated(train, path)
        if cfg.max_duplicates:
            log.info(
                "train: kept %d of %d utterances with repeated transcripts capped at %d (Kaldi's train_nodup)",
                written.utterances,
                sum(1 for _ in full),
                cfg.max_duplicates,
            )
        log.info("%s: %s", path, written)
        if cfg.lm_text:
            write_lm_text(full, Path(cfg.lm_text))


def write_lm_text(utterances: Iterable[Utterance], path: Path) -> None:
    """One transcript a line, in utterance-id order, without ids."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with atomic_open(path, encoding="utf-8") as f:
        for u in utterances:
            f.write(u.text + "\n")
            count += 1
    log.info("%s: %d sentences for the language model", path, count)


def write_validated(d: StreamedDataDir, path: Path) -> Tally:
    """Write, validate the written files, and only then rename them to `path`; returns what it holds."""
    with atomic_dir(path) as tmp:
        written = write_streamed(d, tmp)
        problems = validate_data_dir(tmp)
        if problems:
            shown = "\n  ".join(str(p).replace(str(tmp), str(path)) for p in problems[:MAX_PROBLEMS_SHOWN])
            raise InputError(f"{path}: the prepared data dir has {len(problems)} problems, not written:\n  {shown}")
    return written


def write_set(d: StreamedDataDir, path: Path) -> None:
    log.info("%s: %s", path, write_validated(d, path))


def corpus_texts(cfg: DictConfig, role: str) -> list[Path]:
    """The corpus text files a set is made from (its audio is named by path in wav.scp)."""
    if role == "eval":
        return [speech_dir(cfg.eval2000_dir) / PEM, text_dir(cfg.eval2000_text_dir) / STM]
    files = find_ms98_transcripts(cfg.ms98_dir)
    if role == "train" and cfg.fisher_dirs:
        files += sorted(find_fisher_transcripts(find_fisher_folders(list(cfg.fisher_dirs))).values())
    return files


def prepared_from(cfg: DictConfig, role: str) -> tuple[dict, list[Path]]:
    """What a set's prepare record names: its data options and its corpus text files."""
    values = OmegaConf.to_container(cfg, resolve=True)
    options = {key: values[key] for key in SET_OPTIONS[role] + ("max_unreadable",)}
    inputs = corpus_texts(cfg, role) + ([text_dir(cfg.eval2000_text_dir) / GLM] if role == "eval" else [])
    return options, [p for p in inputs if p.is_file()]


def set_dir(cfg: DictConfig, role: str) -> Path:
    return Path(cfg.data_dir) / cfg[SET_NAME_KEYS[role]]


def sets_to_prepare(cfg: DictConfig, sets: list[str]) -> list[str]:
    """The requested sets whose prepare record does not match (each logged with the reason)."""
    wanted = []
    for role in sets:
        reason = why_rerun(set_dir(cfg, role), STAGE, *prepared_from(cfg, role))
        if reason is None:
            log.info("%s: prepared already (%s), skipping", set_dir(cfg, role), record_path(set_dir(cfg, role), STAGE))
        else:
            log.info("%s: preparing (%s)", set_dir(cfg, role), reason)
            wanted.append(role)
    return wanted


def record_prepared(cfg: DictConfig, role: str) -> None:
    write_record(set_dir(cfg, role), STAGE, RERUN, *prepared_from(cfg, role), {})


def prepare_data(cfg: DictConfig) -> dict[str, Path]:
    """Write the requested data dirs (those not prepared already); returns set role -> data dir."""
    requested = requested_sets(cfg)
    preflight(cfg, requested)
    sets = sets_to_prepare(cfg, requested)
    data_dir = Path(cfg.data_dir)
    if {"train", "dev"} & set(sets):
        with Spool(
            swbd_corpus(cfg.swbd_dir, cfg.ms98_dir, cfg.expected_sph_files, cfg.missing_transcript, cfg.max_unreadable)
        ) as swbd:
            check_first(cfg.dev_utts, len(swbd), "data.dev_utts", "Switchboard")
            if "dev" in sets:
                write_set(swbd.part(0, cfg.dev_utts), data_dir / cfg.dev_set)
                record_prepared(cfg, "dev")
            if "train" in sets:
                write_training_set(cfg, swbd.part(cfg.dev_utts), data_dir / cfg.train_set)
                record_prepared(cfg, "train")
    if "eval" in sets:
        evaluation = prepare_eval2000(cfg.eval2000_dir, cfg.eval2000_text_dir, cfg.max_unreadable)
        write_set(streamed(evaluation), data_dir / cfg.eval_set)
        record_prepared(cfg, "eval")
    return {role: set_dir(cfg, role) for role in requested}
