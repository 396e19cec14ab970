"""An opt-in record of what every step trained (train.record_utterances=true).

`<exp_dir>/trained/learner-<rank>.txt`, one line per applied step of this learner:

    <epoch (1-based)> <step> <utt> <utt> ...

the utterances of its share of the step's batch (those left out for a non-finite loss
included: bad_utterances.txt names them). A resume keeps only the lines its checkpoint
holds (`cut_records`), so the record always says which utterances the current weights were
trained on, epoch by epoch: every utterance once per epoch, over all learners.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

from asr.utils.atomic import write_text

RECORD_DIR = "trained"


def record_path(exp_dir: Path, rank: int) -> Path:
    return Path(exp_dir) / RECORD_DIR / f"learner-{rank}.txt"


class TrainedRecord:
    """Appends one line per applied step; flushed at once, so a killed learner's record
    holds every step it finished."""

    def __init__(self, exp_dir: Path, rank: int):
        path = record_path(exp_dir, rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file: IO = open(path, "a", encoding="utf-8")

    def step(self, epoch: int, step: int, utts: list[str]) -> None:
        self.file.write(f"{epoch} {step} {' '.join(utts)}\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def read_record(path: Path) -> list[tuple[int, int, list[str]]]:
    """(epoch, step, utterances) per line."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        epoch, step, *utts = line.split()
        rows.append((int(epoch), int(step), utts))
    return rows


def cut_records(exp_dir: Path, epoch: int, steps: dict[int, int], default: int = -1) -> None:
    """Keep the lines a resumed run's checkpoint holds: every line of the epochs before
    `epoch` (0-based: the epoch being resumed), and of that epoch those of learner r up to
    step steps[r] (`default` for learners not in `steps`; -1: none of the epoch)."""
    directory = Path(exp_dir) / RECORD_DIR
    if not directory.is_dir():
        return
    for path in sorted(directory.glob("learner-*.txt")):
        last = steps.get(int(path.stem.split("-")[1]), default)
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [line for line in lines if _held(line, epoch, last)]
        if len(kept) != len(lines):
            write_text(path, "".join(kept))


def _held(line: str, epoch: int, last_step: int) -> bool:
    if not line.endswith("\n"):
        return False  # cut short by a kill mid-write
    line_epoch, step = (int(v) for v in line.split(maxsplit=2)[:2])
    return line_epoch <= epoch or (line_epoch == epoch + 1 and step <= last_step)
