"""The optimizer step behind a small interface, so distributed training can replace it.

`Updater.step(loss)` turns one mini-batch loss into one parameter update in four stages,
each a method a subclass can override:

    backward(loss)            gradients of this learner's loss
    synchronize_gradients()   nothing here; SSGD all-reduces (averages) gradients
    clip_gradients()          global-norm clipping; a non-finite norm skips the update
    mix_weights()             nothing here; ADPSGD averages the weights with a ring
                              neighbour (w <- (w + w_j) / 2; the exchange was started by
                              begin_step() so that it overlaps the forward and backward)
    apply_update()            optimizer step with this learner's (synchronized) gradient

`step(loss, weight)` takes the loss as a mean over `weight` units (tokens, frames), so that
learners with different batch sizes can be combined exactly. The loop calls `begin_step()`
before the forward pass, `skip_batch()` instead of `step` for a batch whose loss is not
finite, `consensus()` before evaluating or saving (the weights all learners agree on) and
`close()` at the end; all are no-ops for one learner. `state_dict()` / `load_state_dict()`
hold the optimizer and schedule state (a subclass adds its own, e.g. its exchange step).
"""

from __future__ import annotations

import logging
import math
from contextlib import nullcontext

import torch

from asr.train.schedule import LrSchedule, build_optimizer, final_lr_ratio, scaled_lr

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

    def step(self, loss: torch.Tensor | None, weight: float = 1.0) -> float:
        """One update from `loss` (None: no usable gradient here); returns the gradient norm
        before clipping (NaN/inf: the update was skipped, the weights still mixed)."""
        self.begin_step()
        self.optimizer.zero_grad(set_to_none=True)
        self.local_weight = float(weight)
        self.local_usable = loss is not None
        if loss is not None:
            self.backward(loss)
        self.synchronize_gradients()
        grad_norm = self.clip_gradients() if self.has_gradients() else math.nan
        usable = math.isfinite(grad_norm)
        if not usable:
            self.skipped_updates += 1
            log.warning("non-finite gradient norm (%s); update skipped", grad_norm)
            self.optimizer.zero_grad(set_to_none=True)
        with self.weights_lock():
            self.mix_weights()
            if usable:
                self.apply_update()
        self.end_step()
        self.schedule.step()
        return grad_norm

    def begin_step(self) -> None:
        """Before the forward pass (idempotent): ADPSGD starts its weight exchange here."""

    def end_step(self) -> None:
        """After the update."""

    def skip_batch(self) -> None:
        """This learner's batch had a non-finite loss. One learner: no update at all."""

    def has_gradients(self) -> bool:
        return any(p.grad is not None for p in self.model.parameters())

    def weights_lock(self):
        """Held while the weights change (ADPSGD: a passive learner's server reads them)."""
        return nullcontext()

    def mix_weights(self) -> None:
        """Single learner: nothing to average with."""

    def consensus(self) -> float:
        """Make every learner hold the average of all learners' weights (for evaluation and
        checkpoints); returns the spread before averaging (max relative distance to the mean)."""
        return 0.0

    def close(self) -> None:
        """End of training: stop communication cleanly."""

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


def build_updater(
    model: torch.nn.Module, train_cfg, learners: int = 1, cls: type[Updater] = Updater, total_steps: int = 0, **extra
) -> Updater:
    """train.optimizer with the warm-up/annealing schedule, its peak scaled to `learners`
    learners' global batch (train.final_lr: annealed over `total_steps` updates); `cls` (a
    distributed updater) gets `extra` arguments."""
    optimizer = build_optimizer(model.parameters(), train_cfg)
    schedule = LrSchedule(
        optimizer, scaled_lr(train_cfg, learners), train_cfg.warmup_steps, train_cfg.lr_decay,
        final_ratio=final_lr_ratio(train_cfg), total_steps=total_steps,
    )
    return cls(model, optimizer, schedule, train_cfg.grad_clip, **extra)
