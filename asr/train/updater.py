"""The optimizer step behind a small interface, so distributed training can replace it.

`Updater.step(loss)` turns one mini-batch loss into one parameter update in four stages,
each a method a subclass can override:

    backward(loss)            gradients of this learner's loss
    synchronize_gradients()   nothing here; SSGD all-reduces (averages) gradients
    clip_gradients()          global-norm clipping; a non-finite norm skips the update
    apply_update()            optimizer step; ADPSGD first averages weights with a ring
                              neighbour (w <- (w + w_j) / 2, started before backward to
                              overlap it) and then applies its own gradient

plus `state_dict()` / `load_state_dict()` for checkpoints (optimizer and schedule state;
a subclass adds its own, e.g. its position in the pairing order).
"""

from __future__ import annotations

import logging
import math

import torch

from asr.train.schedule import LrSchedule, build_optimizer

log = logging.getLogger(__name__)


class Updater:
    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, schedule: LrSchedule, grad_clip: float = 0.0):
        self.model = model
        self.optimizer = optimizer
        self.schedule = schedule
        self.grad_clip = grad_clip
        self.skipped_updates = 0

    @property
    def lr(self) -> float:
        return self.schedule.lr

    def step(self, loss: torch.Tensor) -> float:
        """One update from `loss`; returns the gradient norm before clipping (NaN/inf: skipped)."""
        self.optimizer.zero_grad(set_to_none=True)
        self.backward(loss)
        self.synchronize_gradients()
        grad_norm = self.clip_gradients()
        if math.isfinite(grad_norm):
            self.apply_update()
        else:
            self.skipped_updates += 1
            log.warning("non-finite gradient norm (%s); update skipped", grad_norm)
            self.optimizer.zero_grad(set_to_none=True)
        self.schedule.step()
        return grad_norm

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def synchronize_gradients(self) -> None:
        """Single learner: the gradients are already the global ones."""

    def clip_gradients(self) -> float:
        params = [p for p in self.model.parameters() if p.grad is not None]
        max_norm = self.grad_clip if self.grad_clip > 0 else float("inf")
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))

    def apply_update(self) -> None:
        self.optimizer.step()

    def end_epoch(self) -> None:
        self.schedule.end_epoch()

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "schedule": self.schedule.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])


def build_updater(model: torch.nn.Module, train_cfg) -> Updater:
    """The single-learner updater: train.optimizer with the warm-up/annealing schedule."""
    optimizer = build_optimizer(model.parameters(), train_cfg)
    schedule = LrSchedule(optimizer, train_cfg.lr, train_cfg.warmup_steps, train_cfg.lr_decay)
    return Updater(model, optimizer, schedule, train_cfg.grad_clip)
