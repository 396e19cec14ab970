"""The training loop: BLSTM-CTC on one learner, resumable at any checkpoint.

`train(cfg)` is the whole stage. A re-run resumes from the newest readable checkpoint
(losing at most the steps since it) and reproduces the uninterrupted run exactly: the
batch order is a function of (seed, epoch), the sampler restarts at the saved batch, and
model, optimizer, schedule and RNG states are restored. The loss optimised and reported is
the CTC loss summed over the batch divided by its number of target tokens.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from tqdm import tqdm

from asr.config import to_container
from asr.models.blstm import build_model
from asr.text.tokenizer import BLANK_ID, Tokenizer, tokenizer_model_path
from asr.train.checkpoint import CHECKPOINT_FORMAT, CheckpointDir, restore_rng_state, rng_state
from asr.train.data import Batch, BucketBatchSampler, CtcDataset, collate, data_set_dir, feature_set_dir
from asr.train.device import select_device
from asr.train.experiment import check_and_save_config
from asr.train.trainlog import LogRow, TrainLog
from asr.train.updater import build_updater
from asr.utils.errors import InputError

log = logging.getLogger(__name__)

NAN = float("nan")


def ctc_loss_sum(log_probs: torch.Tensor, out_lens: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Summed CTC loss; zero_infinity so one impossible alignment cannot poison the batch."""
    return F.ctc_loss(
        log_probs.transpose(0, 1), batch.targets, out_lens, batch.target_lens, blank=BLANK_ID, reduction="sum", zero_infinity=True
    )


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint."""

    step: int = 0  # batches consumed, skipped bad ones included
    epoch: int = 0  # completed epochs, i.e. the index of the epoch being trained
    batches_done: int = 0  # position inside the current epoch
    elapsed_s: float = 0.0  # training time over all runs
    epoch_loss: float = 0.0  # loss sum and tokens of the current epoch...
    epoch_tokens: int = 0
    window_loss: float = 0.0  # ...and since the last train_log.csv row
    window_tokens: int = 0
    dev_loss: float = NAN  # of the last completed epoch
    best_dev_loss: float = math.inf
    bad_batches: int = 0


def mean(loss_sum: float, tokens: int) -> float:
    return loss_sum / tokens if tokens else NAN


class Trainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.tcfg = cfg.train
        self.exp_dir = Path(cfg.exp_dir)
        self.device = select_device(cfg.device)
        self.tokenizer = Tokenizer(tokenizer_model_path(cfg.tokenizer))
        self.train_set = self.dataset(cfg.data.train_set)
        self.dev_set = self.dataset(cfg.data.dev_set)
        if self.dev_set.feat_dim != self.train_set.feat_dim:
            raise InputError(f"{self.dev_set.reader.set_dir}: feat_dim {self.dev_set.feat_dim} differs from the training set's {self.train_set.feat_dim}")
        torch.manual_seed(cfg.seed)
        self.model_info = {"config": to_container(cfg.model), "input_dim": self.train_set.feat_dim, "num_outputs": self.tokenizer.vocab_size}
        self.model = build_model(cfg.model, self.train_set.feat_dim, self.tokenizer.vocab_size).to(self.device)
        self.updater = build_updater(self.model, self.tcfg)
        self.sampler = BucketBatchSampler(self.train_set.num_frames, self.tcfg.max_frames, self.tcfg.max_utts, seed=cfg.seed)
        self.dev_sampler = BucketBatchSampler(self.dev_set.num_frames, self.tcfg.max_frames, self.tcfg.max_utts, shuffle=False)
        self.checkpoints = CheckpointDir(self.exp_dir / "checkpoints", self.tcfg.keep_checkpoints)
        self.trainlog = TrainLog(self.exp_dir)
        self.progress = Progress()
        self.run_start = time.monotonic()

    def dataset(self, set_name: str) -> CtcDataset:
        cfg = self.cfg
        return CtcDataset(feature_set_dir(cfg, set_name), data_set_dir(cfg, set_name), self.tokenizer, cfg.model.subsample, cfg.features.norm_vars)

    # --- state ---------------------------------------------------------------------------

    def resume(self) -> bool:
        # On the CPU: RNG states must stay CPU tensors; load_state_dict moves the rest.
        state = self.checkpoints.load_newest(map_location="cpu")
        if state is None:
            return False
        try:
            self.model.load_state_dict(state["model"])
            self.updater.load_state_dict(state["updater"])
        except (RuntimeError, ValueError, KeyError) as err:
            raise InputError(
                f"{self.checkpoints.dir}: checkpoint does not fit the configured model ({str(err).splitlines()[0]}); "
                "use a new exp_name for a different model"
            ) from None
        self.progress = Progress(**state["progress"])
        restore_rng_state(state["rng"])
        self.trainlog.truncate_after(self.progress.step)
        log.info("resumed from step %d (epoch %d, batch %d)", self.progress.step, self.progress.epoch + 1, self.progress.batches_done)
        return True

    def elapsed(self) -> float:
        return self.progress.elapsed_s + time.monotonic() - self.run_start

    def state(self) -> dict:
        p = self.progress
        progress = asdict(p) | {"elapsed_s": self.elapsed()}
        return {
            "format": CHECKPOINT_FORMAT,
            "model": self.model.state_dict(),
            "model_info": self.model_info,
            "updater": self.updater.state_dict(),
            "sampler": {"epoch": p.epoch, "batches_done": p.batches_done},
            "rng": rng_state(),
            "step": p.step,
            "epoch": p.epoch,
            "progress": progress,
            "config": to_container(self.cfg),
        }

    # --- training --------------------------------------------------------------------------

    def loader(self, dataset, sampler) -> DataLoader:
        # Own generator: creating an iterator must not draw from the global RNG, or a resumed
        # run's dropout masks would differ from the uninterrupted run's.
        generator = torch.Generator().manual_seed(self.cfg.seed)
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate, num_workers=self.tcfg.num_workers, generator=generator)

    def run(self) -> Path:
        epochs = self.tcfg.epochs
        while self.progress.epoch < epochs:
            self.train_epoch()
            self.finish_epoch()
        self.checkpoints.copy_to(self.checkpoints.periodic()[-1], self.checkpoints.last)
        log.info(
            "training complete after %d epochs: %s (best dev loss %.4f: %s)",
            epochs, self.checkpoints.last, self.progress.best_dev_loss, self.checkpoints.best,
        )
        return self.checkpoints.last

    def train_epoch(self) -> None:
        p = self.progress
        self.sampler.set_epoch(p.epoch, start=p.batches_done)
        total = self.sampler.num_batches()
        bar = tqdm(
            self.loader(self.train_set, self.sampler),
            total=total,
            initial=p.batches_done,
            desc=f"epoch {p.epoch + 1}/{self.tcfg.epochs}",
            disable=None,  # only on a terminal; logs get one line per epoch instead
            leave=False,
            dynamic_ncols=True,
        )
        self.model.train()
        for batch in bar:
            self.train_batch(batch)
            p.step += 1
            p.batches_done += 1
            if p.step % self.tcfg.log_every_steps == 0:
                self.log_row(epoch=p.epoch + 1)
                bar.set_postfix(loss=f"{self.trainlog.rows[-1].train_loss:.3f}", lr=f"{self.updater.lr:.2e}")
            if p.step % self.tcfg.checkpoint_every_steps == 0 and p.batches_done < total:
                self.checkpoints.save(self.state())
        bar.close()

    def train_batch(self, batch: Batch) -> None:
        batch = batch.to(self.device)
        log_probs, out_lens = self.model(batch.feats, batch.feat_lens)
        loss_sum = ctc_loss_sum(log_probs, out_lens, batch)
        if not torch.isfinite(loss_sum):
            self.record_bad_batch(batch, loss_sum.item())
            return
        tokens = int(batch.target_lens.sum())
        self.updater.step(loss_sum / max(tokens, 1))
        value = loss_sum.item()
        p = self.progress
        p.epoch_loss += value
        p.window_loss += value
        p.epoch_tokens += tokens
        p.window_tokens += tokens

    def record_bad_batch(self, batch: Batch, loss: float) -> None:
        """Skip it, and keep its utterance ids so the data can be inspected."""
        self.progress.bad_batches += 1
        path = self.exp_dir / "bad_batches.txt"
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"step {self.progress.step} epoch {self.progress.epoch + 1} loss {loss}: {' '.join(batch.utts)}\n")
        log.warning("step %d: non-finite loss %s; batch of %d utterances skipped (ids in %s)", self.progress.step, loss, len(batch.utts), path)

    @torch.no_grad()
    def evaluate(self) -> float:
        """CTC loss per token on the dev set (dropout off)."""
        self.model.eval()
        loss_sum, tokens = 0.0, 0
        for batch in self.loader(self.dev_set, self.dev_sampler):
            batch = batch.to(self.device)
            log_probs, out_lens = self.model(batch.feats, batch.feat_lens)
            loss_sum += float(ctc_loss_sum(log_probs, out_lens, batch))
            tokens += int(batch.target_lens.sum())
        self.model.train()
        return mean(loss_sum, tokens)

    # --- logging and epoch ends --------------------------------------------------------------

    def log_row(self, epoch: int, dev_loss: float = NAN) -> None:
        """A train_log.csv row for the steps since the previous one (`epoch` 1-based)."""
        p = self.progress
        self.trainlog.append(LogRow(p.step, epoch, mean(p.window_loss, p.window_tokens), dev_loss, self.updater.lr, round(self.elapsed(), 1)))
        p.window_loss, p.window_tokens = 0.0, 0

    def finish_epoch(self) -> None:
        p = self.progress
        dev_loss = self.evaluate()
        train_loss = mean(p.epoch_loss, p.epoch_tokens)
        self.updater.end_epoch()
        improved = dev_loss < p.best_dev_loss
        p.epoch += 1
        p.batches_done = 0
        p.epoch_loss, p.epoch_tokens = 0.0, 0
        p.dev_loss = dev_loss
        p.best_dev_loss = min(p.best_dev_loss, dev_loss)
        self.log_row(epoch=p.epoch, dev_loss=dev_loss)
        path = self.checkpoints.save(self.state())
        if improved:
            self.checkpoints.copy_to(path, self.checkpoints.best)
        self.trainlog.plot()
        log.info(
            "epoch %d/%d: train loss %.4f, dev loss %.4f%s, lr %.3g, %d steps, %.0f s",
            p.epoch, self.tcfg.epochs, train_loss, dev_loss, " (best)" if improved else "", self.updater.lr, p.step, self.elapsed(),
        )


def train(cfg) -> Path:
    """The train stage: returns the path of the final checkpoint (`checkpoints/last.pt`)."""
    if cfg.train.epochs < 1:
        raise InputError(f"train.epochs={cfg.train.epochs}: train for at least one epoch")
    torch.set_num_threads(cfg.train.threads)
    exp_dir = Path(cfg.exp_dir)
    check_and_save_config(exp_dir, cfg, force=cfg.train.force)
    trainer = Trainer(cfg)
    trainer.resume()
    if trainer.progress.epoch >= cfg.train.epochs and trainer.checkpoints.last.is_file():
        log.info("%s: already trained for %d epochs; skipping", trainer.checkpoints.last, trainer.progress.epoch)
        return trainer.checkpoints.last
    return trainer.run()
