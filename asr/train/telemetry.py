"""Training telemetry for TensorBoard, per learner, beside train_log.csv and loss.png.

    <exp_dir>/tensorboard/learner-<rank>/   (tensorboard --logdir <exp_dir>/tensorboard)

At every train.log_every_steps steps each learner writes its own scalars: its loss over the
steps since the last row, the learning rate, input frames per second, and the seconds it spent
waiting for data and for communication (the gradient all-reduce's counts, the ADPSGD average);
at epoch ends learner 0 adds the dev loss, the dev metrics and, under ADPSGD/H-ADPSGD, the
learners' spread before averaging. The x axis is the learner's own step.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

log = logging.getLogger(__name__)


class Telemetry:
    def __init__(self, exp_dir: str | Path, rank: int, enabled: bool = True):
        self.writer = None
        if enabled:
            from torch.utils.tensorboard import SummaryWriter  # imports tensorboard: only when used

            self.writer = SummaryWriter(str(Path(exp_dir) / "tensorboard" / f"learner-{rank}"))
        self.rank = rank
        self.mark = time.perf_counter()
        self.frames = 0
        self.data_wait = 0.0
        self.comm_wait = 0.0

    def add_step(self, frames: int, data_wait: float, comm_wait: float) -> None:
        self.frames += frames
        self.data_wait += data_wait
        self.comm_wait += comm_wait

    def row(self, step: int, loss: float, lr: float) -> None:
        """The steps since the previous row."""
        now = time.perf_counter()
        if self.writer is not None:
            seconds = max(now - self.mark, 1e-9)
            scalars = {
                "train/loss": loss,
                "train/lr": lr,
                "speed/frames_per_second": self.frames / seconds,
                "wait/data_seconds": self.data_wait,
                "wait/communication_seconds": self.comm_wait,
            }
            for tag, value in scalars.items():
                if value == value:  # NaN: no batch trained since the last row
                    self.writer.add_scalar(tag, value, step)
        self.mark, self.frames, self.data_wait, self.comm_wait = now, 0, 0.0, 0.0

    def epoch(self, step: int, values: dict[str, float]) -> None:
        if self.writer is None or self.rank != 0:
            return
        for tag, value in values.items():
            if value == value:
                self.writer.add_scalar(f"epoch/{tag}", value, step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
