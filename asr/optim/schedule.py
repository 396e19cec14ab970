"""Optimizers and the learning-rate schedule: linear warm-up, then annealing.

lr(step, epoch) = peak * min(1, (step + 1) / warmup_steps) * annealing

where `step` counts updates and `epoch` counts completed epochs. Annealing is per epoch,
lr_decay ** epoch, unless train.final_lr is set: then, as in Kaldi's nnet3 recipes
(initial/final effective lrate), the lr decays exponentially with every update, from the peak
to final_lr at the last update, (final_lr / lr) ** (step / total_steps). The schedule is a
pure function of those counters, so resuming only needs them.

The peak is train.lr scaled with the global batch (`scaled_lr`): with N learners of
train.max_frames each (or batch_samples x chunk_frames), the global batch is N x that, and train.lr_scaling=linear
multiplies train.lr by global / train.lr_reference_frames (Goyal et al. 2017; sqrt: by its
square root), reached through the warm-up as large-batch recipes do. lr_scaling=none (the
default) keeps train.lr as given, e.g. when a preset already states the scaled value.
"""

from __future__ import annotations

from typing import Iterable

import torch

from asr.utils.errors import InputError


FUSED_DEVICES = ("cpu", "cuda")  # where torch has the one-kernel Adam and SGD updates


def fused_kernels(params: list[torch.nn.Parameter]) -> bool:
    """Whether torch's fused update serves every parameter. It gives the per-tensor loop's result
    to float32 round-off in about a fifth of its time on a CPU (a 4M-weight Adam step: 4 ms
    instead of 18-25 ms, the demo's model on one AVX2 core)."""
    return bool(params) and all(p.device.type in FUSED_DEVICES and p.is_floating_point() for p in params)


def build_optimizer(params: Iterable[torch.nn.Parameter], train_cfg) -> torch.optim.Optimizer:
    """Adam, or SGD with momentum (classical, or Nesterov's with train.nesterov), as in train.optimizer."""
    params = list(params)
    fused = fused_kernels(params) or None  # None: torch's default choice
    if train_cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=train_cfg.lr, weight_decay=train_cfg.weight_decay, fused=fused)
    if train_cfg.optimizer == "sgd":
        nesterov = bool(getattr(train_cfg, "nesterov", False))
        if nesterov and train_cfg.momentum <= 0:
            raise InputError(
                f"train.nesterov=true needs a momentum; train.momentum={train_cfg.momentum} (the paper's: 0.9)"
            )
        return torch.optim.SGD(
            params,
            lr=train_cfg.lr,
            momentum=train_cfg.momentum,
            nesterov=nesterov,
            weight_decay=train_cfg.weight_decay,
            fused=fused,
        )
    raise ValueError(f"unknown train.optimizer {train_cfg.optimizer!r}; choose adam or sgd")


def batch_frames(train_cfg) -> int:
    """One learner's batch in input frames: train.max_frames, or with fixed-length samples
    (train.chunk_frames > 0) batch_samples x chunk_frames."""
    chunk = int(getattr(train_cfg, "chunk_frames", 0) or 0)
    return int(train_cfg.batch_samples) * chunk if chunk else int(train_cfg.max_frames)


def scaled_lr(train_cfg, learners: int = 1) -> float:
    """train.lr for a global batch of `learners` x one learner's batch (`batch_frames`)."""
    mode = getattr(train_cfg, "lr_scaling", "none")
    if mode == "none":
        return float(train_cfg.lr)
    frames = batch_frames(train_cfg)
    reference = getattr(train_cfg, "lr_reference_frames", 0) or frames
    return lr_for_batch(float(train_cfg.lr), learners * frames / reference, mode)


def lr_for_batch(lr: float, ratio: float, mode: str) -> float:
    """`lr`, tuned at one batch size, for a batch `ratio` times as large: unchanged (none),
    times ratio (linear) or times sqrt(ratio) (sqrt). The trainer and the sweep both scale so."""
    if mode == "none":
        return float(lr)
    if mode == "linear":
        return float(lr) * ratio
    if mode == "sqrt":
        return float(lr) * ratio**0.5
    raise ValueError(f"unknown lr_scaling {mode!r}; choose none, linear or sqrt")


def final_lr_ratio(train_cfg) -> float:
    """train.final_lr as a fraction of train.lr (0: per-epoch lr_decay instead); with lr_scaling
    the schedule applies it to the scaled peak, so the final lr scales with the peak."""
    final_lr = float(getattr(train_cfg, "final_lr", 0.0) or 0.0)
    if final_lr < 0 or final_lr > float(train_cfg.lr):
        raise ValueError(f"train.final_lr={final_lr} must lie between 0 (off) and train.lr={train_cfg.lr}")
    return final_lr / float(train_cfg.lr)


class LrSchedule:
    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        base_lr: float,
        warmup_steps: int = 0,
        decay: float = 1.0,
        final_ratio: float = 0.0,
        total_steps: int = 0,
    ):
        if final_ratio > 0 and total_steps < 1:
            raise ValueError("an lr that decays to a final value needs the number of updates (total_steps)")
        self.optimizer = optimizer
        self.base_lr = base_lr
        self.warmup_steps = warmup_steps
        self.decay = decay
        self.final_ratio = final_ratio
        self.total_steps = total_steps
        self.steps = 0
        self.epochs = 0
        self._apply()

    @property
    def lr(self) -> float:
        warmup = min(1.0, (self.steps + 1) / self.warmup_steps) if self.warmup_steps > 0 else 1.0
        return self.base_lr * warmup * self.annealing()

    def annealing(self) -> float:
        if self.final_ratio > 0:
            return self.final_ratio ** min(1.0, self.steps / self.total_steps)
        return self.decay**self.epochs

    def _apply(self) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr

    def step(self) -> None:
        """After each update."""
        self.steps += 1
        self._apply()

    def end_epoch(self) -> None:
        self.epochs += 1
        self._apply()

    def state_dict(self) -> dict:
        return {"steps": self.steps, "epochs": self.epochs}

    def load_state_dict(self, state: dict) -> None:
        self.steps = int(state["steps"])
        self.epochs = int(state["epochs"])
        self._apply()
