"""The training loop: BLSTM-CTC on one learner, resumable at any checkpoint.

`train(cfg)` is the whole stage. A re-run resumes from the newest readable checkpoint
(losing at most the steps since it) and reproduces the uninterrupted run exactly: the
batch order is a function of (seed, epoch), the sampler restarts at the saved batch, and
model, optimizer, schedule and RNG states are restored. What is trained is the objective of
train.objective (asr/train/objectives.py): the loss optimised and reported is its loss summed
over the batch divided by its count (CTC: target tokens; frame CE: frames).

Under torchrun (distributed=ssgd|adpsgd|hadpsgd, asr/distributed/) every learner runs this
loop on its own shard of each batch; rank 0 alone writes checkpoints, logs and plots;
evaluation and checkpoints use the weights all learners agree on (`Updater.consensus()`).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from asr.config import to_container
from asr.distributed.build import build_training_updater
from asr.distributed.checkpointing import check_learners, distributed_entry, learner_rng, load_resume_state
from asr.distributed.context import DistributedContext, DistributedError, fail_fast, init_distributed
from asr.features.specaugment import SpecAugment
from asr.models.blstm import build_model
from asr.train.checkpoint import CHECKPOINT_FORMAT, CheckpointDir, restore_rng_state, rng_state
from asr.train.data import Batch, BucketBatchSampler, collate
from asr.train.device import autocast, select_device, training_precision
from asr.train.experiment import check_and_save_config
from asr.train.objectives import build_objective, ctc_loss_sum  # noqa: F401  (ctc_loss_sum: re-exported)
from asr.train.trainlog import LogRow, TrainLog
from asr.utils.errors import InputError

log = logging.getLogger(__name__)

NAN = float("nan")


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
    def __init__(self, cfg, dist: DistributedContext | None = None):
        self.cfg = cfg
        self.tcfg = cfg.train
        self.exp_dir = Path(cfg.exp_dir)
        self.dist = dist or DistributedContext(device=select_device(cfg.device))
        self.device = self.dist.device
        self.precision = training_precision(self.tcfg.precision, self.device)
        self.objective = build_objective(cfg)
        self.train_set = self.dataset(cfg.data.train_set)
        self.dev_set = self.dataset(cfg.data.dev_set)
        self.train_set.reader.augment = SpecAugment.from_config(cfg.features.specaugment)  # None: off
        if self.dev_set.feat_dim != self.train_set.feat_dim:
            raise InputError(f"{self.dev_set.reader.set_dir}: feat_dim {self.dev_set.feat_dim} differs from the training set's {self.train_set.feat_dim}")
        torch.manual_seed(cfg.seed)
        self.objective.write_training_files(self.exp_dir, self.train_set)
        self.dev_metrics: dict[str, float] = {}
        num_outputs = self.objective.num_outputs
        self.model_info = {"config": to_container(cfg.model), "input_dim": self.train_set.feat_dim, "num_outputs": num_outputs}
        self.model = build_model(cfg.model, self.train_set.feat_dim, num_outputs).to(self.device)
        shard = {"num_replicas": self.dist.world_size, "rank": self.dist.rank}
        self.sampler = BucketBatchSampler(self.train_set.num_frames, self.tcfg.max_frames, self.tcfg.max_utts, seed=cfg.seed, **shard)
        total_steps = self.sampler.num_batches() * self.tcfg.epochs
        self.updater = build_training_updater(self.model, cfg, self.dist, total_steps)
        if self.dist.distributed:
            torch.manual_seed(cfg.seed + 1000 * self.dist.rank)  # same initial weights, own dropout masks
        self.dev_sampler = BucketBatchSampler(self.dev_set.num_frames, self.tcfg.max_frames, self.tcfg.max_utts, shuffle=False, **shard)
        self.checkpoints = CheckpointDir(self.exp_dir / "checkpoints", self.tcfg.keep_checkpoints)
        self.trainlog = TrainLog(self.exp_dir, self.objective.loss_label)
        self.progress = Progress()
        self.run_start = time.monotonic()

    def dataset(self, set_name: str):
        return self.objective.dataset(set_name)

    # --- state ---------------------------------------------------------------------------

    def resume(self) -> bool:
        # On the CPU: RNG states must stay CPU tensors; load_state_dict moves the rest.
        state = load_resume_state(self.checkpoints, self.dist)
        if state is None:
            return False
        check_learners(state, self.dist, self.checkpoints.dir)
        try:
            self.model.load_state_dict(state["model"])
            self.updater.load_state_dict(state["updater"])
        except (RuntimeError, ValueError, KeyError) as err:
            raise InputError(
                f"{self.checkpoints.dir}: checkpoint does not fit the configured model ({str(err).splitlines()[0]}); "
                "use a new exp_name for a different model"
            ) from None
        self.progress = Progress(**state["progress"])
        rng = learner_rng(state, self.dist)
        if rng is not None:
            restore_rng_state(rng)
        if self.dist.is_writer:
            self.trainlog.truncate_after(self.progress.step)
        log.info("resumed from step %d (epoch %d, batch %d)", self.progress.step, self.progress.epoch + 1, self.progress.batches_done)
        return True

    def elapsed(self) -> float:
        return self.progress.elapsed_s + time.monotonic() - self.run_start

    def state(self) -> dict:
        spread = self.updater.consensus()  # the weights all learners agree on
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
            "distributed": distributed_entry(self.dist, spread),
        }

    def save_checkpoint(self) -> Path | None:
        """Every learner calls it (state() is a collective); rank 0 writes the file."""
        state = self.state()
        return self.checkpoints.save(state) if self.dist.is_writer else None

    # --- training --------------------------------------------------------------------------

    def loader(self, dataset, sampler) -> DataLoader:
        # Own generator: creating an iterator must not draw from the global RNG, or a resumed
        # run's dropout masks would differ from the uninterrupted run's.
        generator = torch.Generator().manual_seed(self.cfg.seed)
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate, num_workers=self.tcfg.num_workers, generator=generator)

    def run(self) -> Path:
        epochs = self.tcfg.epochs
        log.info("training on %s in %s", self.device, self.precision)
        while self.progress.epoch < epochs:
            self.train_epoch()
            self.finish_epoch()
        if not self.dist.is_writer:
            return self.checkpoints.last
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
            disable=None if self.dist.is_writer else True,  # only on a terminal; logs get one line per epoch instead
            leave=False,
            dynamic_ncols=True,
        )
        self.model.train()
        for batch in bar:
            self.train_batch(batch)
            p.step += 1
            p.batches_done += 1
            if p.step % self.tcfg.log_every_steps == 0:
                row = self.log_row(epoch=p.epoch + 1)
                bar.set_postfix(loss=f"{row.train_loss:.3f}", lr=f"{self.updater.lr:.2e}")
            if p.step % self.tcfg.checkpoint_every_steps == 0 and p.batches_done < total:
                self.save_checkpoint()
        bar.close()

    def train_batch(self, batch: Batch) -> None:
        batch = batch.to(self.device)
        self.updater.begin_step()  # ADPSGD: the weight exchange runs during forward and backward
        with autocast(self.device, self.precision):
            log_probs, out_lens = self.model(batch.feats, batch.feat_lens)
        loss_sum, tokens = self.objective.loss(log_probs, out_lens, batch)
        if not torch.isfinite(loss_sum):
            self.record_bad_batch(batch, loss_sum.item())
            self.updater.skip_batch()  # other learners still count on this one's part
            return
        self.updater.step(loss_sum / max(tokens, 1), weight=tokens)
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
        line = f"step {self.progress.step} epoch {self.progress.epoch + 1} loss {loss}: {' '.join(batch.utts)}"
        if not self.dist.is_writer:  # only rank 0 writes files; the ids go to this learner's log
            log.warning("learner %d, bad batch: %s", self.dist.rank, line)
            return
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
        log.warning("step %d: non-finite loss %s; batch of %d utterances skipped (ids in %s)", self.progress.step, loss, len(batch.utts), path)

    @torch.no_grad()
    def evaluate(self) -> float:
        """The objective's loss per token (CTC) or frame (CE) on the dev set (dropout off);
        its other statistics (CE: frame accuracy) go to self.dev_metrics. Learners evaluate
        their shards of the dev set with the weights they agree on."""
        self.updater.consensus()
        self.model.eval()
        loss_sum, tokens = 0.0, 0
        stats: dict[str, float] = {}
        for batch in self.loader(self.dev_set, self.dev_sampler):
            batch = batch.to(self.device)
            with autocast(self.device, self.precision):
                log_probs, out_lens = self.model(batch.feats, batch.feat_lens)
            batch_loss, batch_count = self.objective.loss(log_probs, out_lens, batch)
            loss_sum += float(batch_loss)
            tokens += batch_count
            for key, value in self.objective.eval_stats(log_probs, out_lens, batch).items():
                stats[key] = stats.get(key, 0.0) + value
        self.model.train()
        keys = sorted(stats)
        loss_sum, tokens, *values = self.dist.all_reduce_sum([loss_sum, tokens] + [stats[k] for k in keys])
        self.dev_metrics = self.objective.metrics(dict(zip(keys, values)))
        return mean(loss_sum, int(tokens))

    # --- logging and epoch ends --------------------------------------------------------------

    def log_row(self, epoch: int, dev_loss: float = NAN) -> LogRow:
        """A train_log.csv row for the steps since the previous one (`epoch` 1-based); the
        train loss is rank 0's own (no collective between epoch ends)."""
        p = self.progress
        row = LogRow(p.step, epoch, mean(p.window_loss, p.window_tokens), dev_loss, self.updater.lr, round(self.elapsed(), 1))
        if self.dist.is_writer:
            self.trainlog.append(row)
        p.window_loss, p.window_tokens = 0.0, 0
        return row

    def finish_epoch(self) -> None:
        p = self.progress
        dev_loss = self.evaluate()
        epoch_loss, epoch_tokens = self.dist.all_reduce_sum([p.epoch_loss, p.epoch_tokens])
        train_loss = mean(epoch_loss, int(epoch_tokens))
        self.updater.end_epoch()
        improved = dev_loss < p.best_dev_loss
        p.epoch += 1
        p.batches_done = 0
        p.epoch_loss, p.epoch_tokens = 0.0, 0
        p.dev_loss = dev_loss
        p.best_dev_loss = min(p.best_dev_loss, dev_loss)
        self.log_row(epoch=p.epoch, dev_loss=dev_loss)
        path = self.save_checkpoint()
        if path is None:
            return
        if improved:
            self.checkpoints.copy_to(path, self.checkpoints.best)
        self.trainlog.plot()
        log.info(
            "epoch %d/%d: train loss %.4f, dev loss %.4f%s%s, lr %.3g, %d steps, %.0f s",
            p.epoch, self.tcfg.epochs, train_loss, dev_loss, " (best)" if improved else "",
            "".join(f", dev {name.replace('_', ' ')} {value:.4f}" for name, value in self.dev_metrics.items()),
            self.updater.lr, p.step, self.elapsed(),
        )


def train(cfg) -> Path:
    """The train stage: returns the path of the final checkpoint (`checkpoints/last.pt`)."""
    if cfg.train.epochs < 1:
        raise InputError(f"train.epochs={cfg.train.epochs}: train for at least one epoch")
    torch.set_num_threads(cfg.train.threads)
    exp_dir = Path(cfg.exp_dir)
    dist = init_distributed(cfg)
    try:
        check_and_save_config(exp_dir, cfg, force=cfg.train.force, write=dist.is_writer)
        trainer = Trainer(cfg, dist)
        trainer.resume()
        if trainer.progress.epoch >= cfg.train.epochs and trainer.checkpoints.last.is_file():
            log.info("%s: already trained for %d epochs; skipping", trainer.checkpoints.last, trainer.progress.epoch)
            last = trainer.checkpoints.last
        else:
            last = trainer.run()
        trainer.updater.close()
    except BaseException as err:
        if dist.distributed or isinstance(err, DistributedError):
            fail_fast(err)  # threads may be blocked in a receive: exit now, with the reason, never hang
        raise
    dist.close()
    return last
