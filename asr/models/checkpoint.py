"""Checkpoints: atomic save, newest-good-one resume, and the names decoding asks for.

Layout of `<exp_dir>/checkpoints/`:

    step-000001200.pt   periodic (every train.checkpoint_every_steps steps and every epoch
                        end), the newest train.keep_checkpoints kept
    epoch-0003.pt       copy of the checkpoint of each epoch end, the newest
                        train.keep_epoch_checkpoints kept (what asr.average averages)
    best.pt             copy of the epoch-end checkpoint with the lowest dev loss so far
    last.pt             the final model, written when training completes
    avg-last5.pt        the mean of checkpoints (python -m asr.average), decode.checkpoint=avg-last5

A checkpoint is a dict (torch.save, loadable with weights_only=True):

    format      CHECKPOINT_FORMAT
    model       model.state_dict()
    model_info  {"config": model config dict, "input_dim": D, "num_outputs": V}
    updater     Updater.state_dict(): {"optimizer": ..., "schedule": {"steps", "epochs"}}
    sampler     {"epoch": e, "batches_done": b}: the next batch is batch b of epoch e
    rng         python / numpy / torch (and CUDA) generator states
    step        batches consumed so far (including skipped bad batches)
    epoch       completed epochs
    progress    loss accumulators, elapsed seconds, dev_loss, best_dev_loss
    config      the whole resolved experiment config
"""

from __future__ import annotations

import logging
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch

from asr.utils.errors import InputError
from asr.utils.record import recorded_output, verify

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1
REQUIRED_KEYS = ("format", "model", "model_info", "updater", "sampler", "rng", "step", "epoch", "progress", "config")
PERIODIC = re.compile(r"^step-(\d+)\.pt$")
EPOCH_END = re.compile(r"^epoch-(\d+)\.pt$")
RERUN = {"train": "python -m asr.train", "average": "python -m asr.average"}  # the stages that write checkpoints


class CorruptCheckpoint(InputError):
    """A checkpoint file that cannot be read back (truncated, overwritten, incomplete)."""


def save_checkpoint(path: str | os.PathLike, state: dict, stage: str = "train") -> Path:
    """Write a checkpoint and its entry in `<dir>/<stage>.record.json` (its size and sha1)."""
    path = Path(path)
    with recorded_output(path, stage, RERUN[stage]) as tmp:
        torch.save(state, tmp)
    return path


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """Load and check a checkpoint; an unreadable or incomplete file raises CorruptCheckpoint."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: checkpoint not found")
    try:
        verify(path, "checkpoint")
    except InputError as err:
        raise CorruptCheckpoint(str(err)) from None
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises RuntimeError, EOFError, UnpicklingError, ... for bad files
        reason = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}"
        raise CorruptCheckpoint(f"{path}: unreadable checkpoint ({reason}); delete it") from None
    missing = [k for k in REQUIRED_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise CorruptCheckpoint(f"{path}: not a training checkpoint (missing {', '.join(missing)}); delete it")
    if state["format"] != CHECKPOINT_FORMAT:
        raise InputError(f"{path}: checkpoint format {state['format']}, this toolkit reads {CHECKPOINT_FORMAT}")
    return state


def rng_state() -> dict:
    """Every random generator training touches, in types weights_only loading accepts."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "python": list(random.getstate()[1]),
        "python_gauss": random.getstate()[2],
        "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": pos, "has_gauss": has_gauss, "gauss": gauss},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict) -> None:
    random.setstate((3, tuple(state["python"]), state["python_gauss"]))
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class CheckpointDir:
    def __init__(self, directory: str | os.PathLike, keep: int = 3):
        self.dir = Path(directory)
        self.keep = max(1, keep)

    @property
    def last(self) -> Path:
        return self.dir / "last.pt"

    @property
    def best(self) -> Path:
        return self.dir / "best.pt"

    def periodic(self) -> list[Path]:
        """Periodic checkpoints, oldest first."""
        if not self.dir.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.dir.iterdir() if (m := PERIODIC.match(p.name))]
        return [p for _, p in sorted(found)]

    def epoch_ends(self) -> list[Path]:
        """The kept copies of epoch-end checkpoints, oldest first."""
        if not self.dir.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.dir.iterdir() if (m := EPOCH_END.match(p.name))]
        return [p for _, p in sorted(found)]

    def keep_epoch_end(self, source: Path, epoch: int, keep: int) -> None:
        """Copy an epoch end's checkpoint to epoch-<E>.pt and keep the newest `keep` of them."""
        if keep < 1:
            return
        self.copy_to(source, self.dir / f"epoch-{epoch:04d}.pt")
        for old in self.epoch_ends()[:-keep]:
            old.unlink(missing_ok=True)

    def save(self, state: dict) -> Path:
        path = save_checkpoint(self.dir / f"step-{state['step']:09d}.pt", state)
        for old in self.periodic()[: -self.keep]:
            old.unlink(missing_ok=True)
        return path

    def copy_to(self, source: Path, target: Path) -> None:
        with recorded_output(target, "train", RERUN["train"]) as tmp:
            shutil.copyfile(source, tmp)

    def load_newest(self, map_location: str | torch.device = "cpu") -> dict | None:
        """The newest readable periodic checkpoint; None if there is none.

        A corrupt one is reported and the previous one tried, so a crash while the file
        system was writing costs at most one checkpoint interval more.
        """
        candidates = self.periodic()
        errors = []
        for path in reversed(candidates):
            try:
                state = load_checkpoint(path, map_location)
            except CorruptCheckpoint as err:
                log.warning("%s; falling back to the previous checkpoint", err)
                errors.append(str(err))
                continue
            if errors:
                log.warning("resuming from %s instead", path)
            return state
        if errors:
            raise InputError(f"{self.dir}: no readable checkpoint ({'; '.join(errors)})")
        return None

    def resolve(self, choice: str) -> Path:
        """`last`, `best`, the name of another checkpoint of this directory (`avg-last5`,
        `epoch-0003`: <dir>/<name>.pt) or a path, as decode.checkpoint names them."""
        if choice in ("last", "best"):
            path = self.last if choice == "last" else self.best
            if not path.is_file():
                raise InputError(
                    f"{path}: no {choice} checkpoint; "
                    "finish training first (python -m asr.train) or set decode.checkpoint=<path>"
                )
            return path
        named = self.dir / f"{choice}.pt"
        if "/" not in choice and not choice.endswith(".pt"):
            if named.is_file():
                return named
            if choice.startswith("avg-"):
                raise InputError(
                    f"{named}: no such average; make it with python -m asr.average (decode.checkpoint={choice})"
                )
        path = Path(choice)
        if not path.is_file():
            raise InputError(
                f"{path}: checkpoint not found (decode.checkpoint is last, best, "
                f"a name in {self.dir} such as avg-last5, or a path)"
            )
        return path


def model_from_checkpoint(state: dict, path: str | os.PathLike = "<checkpoint>"):
    """The acoustic model a checkpoint holds, built from its own model_info (eval mode)."""
    from asr.models.blstm import build_model

    info = state["model_info"]
    model = build_model(info["config"], info["input_dim"], info["num_outputs"])
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as err:
        raise CorruptCheckpoint(
            f"{path}: weights do not match the model it describes ({str(err).splitlines()[0]})"
        ) from None
    return model.eval()
