"""The optimizer step behind a small interface, so distributed training can replace it.

`Updater.step(loss, weight)` turns one mini-batch loss into one parameter update in stages,
each a method a subclass can override:

    gradient_weight(w, ok)    the factor this learner's loss is scaled by (SSGD: so that the
                              learners' gradients combine weighted by their counts), or None
                              when no learner of the group has a usable loss (all skip)
    backward(loss)            gradients (DDP all-reduces them during the backward pass)
    clip_gradients()          global-norm clipping; a non-finite norm skips the update
    prepare_mix()             nothing here; ADPSGD waits for the weight average it started in
                              begin_step() (so that it overlapped the forward and backward)
    apply_mix(), apply_update()   under the weights lock: the average, then the gradient step

`step(loss, weight)` takes the loss as a mean over `weight` units (tokens, frames), so that
learners with different batch sizes can be combined exactly. `wrap(model)` is the module the
training loop calls (DistributedDataParallel for SSGD). The loop calls `begin_step()` before
the forward pass, `skip_batch()` instead of `step` for a batch whose loss is not finite, and
`close()` at the end; decentralized updaters (`decentralized = True`) also have
`average_for_epoch_end()` and `quiesce()`. `state_dict()` / `load_state_dict()` hold the
optimizer, schedule and loss-scaler state (a subclass adds its own, e.g. its exchange step).

With fp16 training a GradScaler (`scaler`) scales the loss before backward and unscales the
gradients before clipping; its overflow checks follow our own non-finite-norm rule.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import nullcontext

import torch
from torch import Tensor

from asr.optim.schedule import LrSchedule, build_optimizer, final_lr_ratio, scaled_lr

log = logging.getLogger(__name__)
ASK = object()  # step(): ask gradient_weight for the loss factor


def optimizer_moments(optimizer: torch.optim.Optimizer) -> list[Tensor]:
    """The optimizer's per-parameter state tensors (momenta, Adam's moments), in a fixed order.

    Only tensors shaped like their parameter: that leaves out counters such as Adam's `step`,
    which lives on the CPU even when the parameters are on a GPU."""
    tensors = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            tensors += [state[k] for k in sorted(state) if torch.is_tensor(state[k]) and state[k].shape == p.shape]
    return tensors


def create_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Give every parameter its optimizer state now, as its first update would create it (zero
    moments, step 0), rather than at that update. Learners average their moments (ADPSGD's
    epoch end, node checkpoints), and a slow learner may not have updated yet: it can claim no
    batch of a short epoch. Done by one update with zero gradients, zero lr and no weight decay,
    which leaves the weights as they are; its step counters are then reset."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    grads = [p.grad for p in params]
    settings = [(group["lr"], group["weight_decay"]) for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"], group["weight_decay"] = 0.0, 0.0
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    for group, (lr, weight_decay) in zip(optimizer.param_groups, settings):
        group["lr"], group["weight_decay"] = lr, weight_decay
    for p, grad in zip(params, grads):
        p.grad = grad
        step = optimizer.state[p].get("step")
        if torch.is_tensor(step):
            step.zero_()
        elif step is not None:
            optimizer.state[p]["step"] = 0


class Updater:
    decentralized = False  # learners keep their own weights (ADPSGD, H-ADPSGD)

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        schedule: LrSchedule,
        grad_clip: float = 0.0,
        scaler: torch.amp.GradScaler | None = None,
    ):
        self.model = model
        self.optimizer = optimizer
        self.schedule = schedule
        self.grad_clip = grad_clip
        self.scaler = scaler if scaler is not None and scaler.is_enabled() else None
        self.skipped_without_gradient = 0  # updates skipped with no gradient at all (known on the host)
        self.skipped_non_finite: Tensor | None = None  # ...with a non-finite norm (counted on the device)
        self.skipped_reported = 0
        self.comm_wait_s = 0.0  # seconds spent waiting for other learners outside backward (telemetry)

    @property
    def lr(self) -> float:
        return self.schedule.lr

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module the training loop runs forward and backward through."""
        return model

    def step(self, loss: torch.Tensor | None, weight: float = 1.0, *, factor: float | None | object = ASK):
        """One update from `loss` (None: no usable gradient here); `factor` is gradient_weight's
        answer when the caller has it (the training loop), else it is asked here. Returns the
        gradient norm before clipping, on the device (NaN/inf: the update was skipped, the
        weights still mixed), or NaN when there was no gradient."""
        self.begin_step()
        self.optimizer.zero_grad(set_to_none=True)
        if factor is ASK:
            waited = time.perf_counter()
            factor = self.gradient_weight(float(weight), loss is not None)
            self.comm_wait_s += time.perf_counter() - waited
        if loss is not None and factor is not None:
            self.backward(loss * factor if factor != 1.0 else loss)
        norm = self.clip_gradients() if self.has_gradients() else None
        if norm is None:
            self.skipped_without_gradient += 1
        else:
            found_inf = (~torch.isfinite(norm)).float()
            before = self.skipped_non_finite
            self.skipped_non_finite = found_inf if before is None else before + found_inf
        waited = time.perf_counter()
        mix = self.prepare_mix()
        self.comm_wait_s += time.perf_counter() - waited
        with self.weights_lock():
            self.apply_mix(mix)
            if norm is not None:
                self.apply_update(found_inf)
        if self.scaler is not None and norm is not None:
            self.scaler.update()  # its scale follows the overflow unscale_() found
        self.end_step()
        self.schedule.step()
        return norm if norm is not None else math.nan

    @property
    def skipped_updates(self) -> int:
        """Updates skipped so far, for either reason (a host read of the device's count)."""
        on_device = 0 if self.skipped_non_finite is None else int(self.skipped_non_finite.item())
        return self.skipped_without_gradient + on_device

    def report_skipped(self) -> None:
        """Warn about the updates skipped since the last report; the loop calls it where it reads
        the device anyway (log rows, epoch ends), not every step."""
        skipped = self.skipped_updates
        if skipped > self.skipped_reported:
            log.warning(
                "%d update(s) skipped (non-finite gradient norm, or no gradient): %d so far",
                skipped - self.skipped_reported,
                skipped,
            )
        self.skipped_reported = skipped

    def gradient_weight(self, weight: float, usable: bool) -> float | None:
        """This learner's loss factor, from its count and usability and its group's sums."""
        _, (total, unusable) = self.count_sums(torch.tensor([weight, 0.0 if usable else 1.0], dtype=torch.float64))
        return self.gradient_factor(weight, total, unusable)

    def count_sums(self, local: Tensor) -> tuple[list[float], list[float]]:
        """(this learner's values, their sums over its gradient group) of a small vector of
        counts, read to the host at once. One learner: its own."""
        values = local.tolist()
        return values, values

    def gradient_factor(self, weight: float, total: float, unusable: float) -> float | None:
        """The factor from count_sums' answer (`total`: the group's weight, `unusable`: how many
        learners have no usable loss). One learner: its loss as it is."""
        return None if unusable > 0 else 1.0

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

    def changing_weights(self):
        """Around any in-place change of the weights outside `step` (loading a checkpoint):
        ADPSGD also orders it with its snapshots on the GPU."""
        return self.weights_lock()

    def prepare_mix(self):
        """Single learner: nothing to average with."""
        return None

    def apply_mix(self, mix) -> None:
        """Single learner: nothing to average with."""

    def quiesce(self) -> None:
        """Before a learner saves its own state: make the weights alone hold it."""

    def close(self) -> None:
        """End of training: stop communication cleanly."""

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def clip_gradients(self) -> Tensor:
        """The gradients' global norm before clipping, left on their device."""
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        params = [p for p in self.model.parameters() if p.grad is not None]
        max_norm = self.grad_clip if self.grad_clip > 0 else float("inf")
        return torch.nn.utils.clip_grad_norm_(params, max_norm)

    def apply_update(self, found_inf: Tensor | None = None) -> None:
        """The optimizer step, skipped where `found_inf` (0-dim, on the parameters' device) is
        nonzero: a fused optimizer reads it in its kernel; any other reads it here."""
        if self.scaler is not None:
            self.scaler.step(self.optimizer)  # unscale_() found the same non-finite gradients
        elif found_inf is None:
            self.optimizer.step()
        elif self.optimizer.defaults.get("fused"):
            self.optimizer.grad_scale, self.optimizer.found_inf = None, found_inf
            try:
                self.optimizer.step()
            finally:
                del self.optimizer.grad_scale, self.optimizer.found_inf
        elif not bool(found_inf):
            self.optimizer.step()

    def end_epoch(self) -> None:
        self.schedule.end_epoch()

    def state_dict(self) -> dict:
        state = {"optimizer": self.optimizer.state_dict(), "schedule": self.schedule.state_dict()}
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])


def build_updater(
    model: torch.nn.Module,
    train_cfg,
    learners: int = 1,
    cls: type[Updater] = Updater,
    total_steps: int = 0,
    scaler: torch.amp.GradScaler | None = None,
    **extra,
) -> Updater:
    """train.optimizer with the warm-up/annealing schedule, its peak scaled to `learners`
    learners' global batch (train.final_lr: annealed over `total_steps` updates); `cls` (a
    distributed updater) gets `extra` arguments."""
    optimizer = build_optimizer(model.parameters(), train_cfg)
    create_optimizer_state(optimizer)
    schedule = LrSchedule(
        optimizer,
        scaled_lr(train_cfg, learners),
        train_cfg.warmup_steps,
        train_cfg.lr_decay,
        final_ratio=final_lr_ratio(train_cfg),
        total_steps=total_steps,
    )
    return cls(model, optimizer, schedule, train_cfg.grad_clip, scaler=scaler, **extra)
