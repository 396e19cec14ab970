"""The training log: `<exp_dir>/train_log.csv` and its plot `<exp_dir>/loss.png`.

One row every train.log_every_steps steps (train loss = mean CTC loss per token since the
previous row) and one at each epoch end (with the dev loss). On resume, rows after the
checkpoint's step are dropped, because those steps are trained again.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from asr.utils.atomic import atomic_path, write_text


@dataclass
class LogRow:
    step: int
    epoch: int  # 1-based epoch the step belongs to
    train_loss: float  # NaN when no batch was trained since the previous row
    dev_loss: float  # NaN except at epoch ends
    lr: float
    elapsed_s: float


COLUMNS = [f.name for f in fields(LogRow)]
INT_COLUMNS = {"step": int, "epoch": int}


def _format(value) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return str(value)


def _parse(text: str, kind: type):
    return kind(text) if text != "" else float("nan")


class TrainLog:
    def __init__(self, exp_dir: str | Path, loss_label: str = "loss"):
        self.loss_label = loss_label
        self.csv_path = Path(exp_dir) / "train_log.csv"
        self.plot_path = Path(exp_dir) / "loss.png"
        self.rows: list[LogRow] = self._read()

    def _read(self) -> list[LogRow]:
        if not self.csv_path.is_file():
            return []
        with open(self.csv_path, newline="") as f:
            return [
                LogRow(**{k: _parse(row[k], INT_COLUMNS.get(k, float)) for k in COLUMNS}) for row in csv.DictReader(f)
            ]

    def truncate_after(self, step: int) -> None:
        """Forget rows for steps that will be trained again after a resume."""
        kept = [r for r in self.rows if r.step <= step]
        if len(kept) != len(self.rows):
            self.rows = kept
            self._write_csv()

    def append(self, row: LogRow) -> None:
        self.rows.append(row)
        self._write_csv()

    def _write_csv(self) -> None:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(COLUMNS)
        for row in self.rows:
            writer.writerow([_format(v) for v in asdict(row).values()])
        write_text(self.csv_path, out.getvalue())

    def plot(self) -> None:
        from matplotlib.figure import Figure  # here, not at the top: learners that never plot skip its ~0.5 s import

        fig = Figure(figsize=(7, 4), dpi=100)
        ax = fig.add_subplot()
        train = [(r.step, r.train_loss) for r in self.rows if not math.isnan(r.train_loss)]
        dev = [(r.step, r.dev_loss) for r in self.rows if not math.isnan(r.dev_loss)]
        if train:  # markers too: a log of one row is one point, not an invisible line
            ax.plot(*zip(*train), ".-", markersize=4, label="train")
        if dev:
            ax.plot(*zip(*dev), "o-", label="dev (epoch end)")
        ax.set_xlabel("step")
        ax.set_ylabel(self.loss_label)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        with atomic_path(self.plot_path) as tmp:
            fig.savefig(tmp, format="png")
