"""The training loop: BLSTM acoustic models on one learner or many, resumable at any checkpoint.

`train(cfg)` is the whole stage. A re-run resumes from what the last run saved
(asr/train/resume.py). What is trained is the objective of train.objective
(asr/train/objectives.py): the loss optimised and reported is its loss summed over the batch
divided by its count (CTC: target tokens; frame CE: frames).

Under torchrun (distributed=ssgd|adpsgd|hadpsgd, asr/distributed/):

- one learner and SSGD: every step, the batch of the epoch's plan at the current position
  (SSGD learners each take their share of it). Checkpoints hold the one model; a resume with
  the same number of learners reproduces the uninterrupted run exactly.
- ADPSGD and H-ADPSGD: a node claims the plan's next batch when it is ready for one
  (asr/distributed/claims.py), so a fast node trains more of the epoch and nobody waits for a
  slow one. A node claims one batch ahead (read while its step runs), and a batch counts as
  trained, in its checkpoints, only once its step is applied. Nodes never synchronise inside
  an epoch: each node's leader writes the node's own checkpoint every
  train.checkpoint_every_steps of its steps. At an epoch end (where all learners meet: one sum
  that agrees on stopping, then the average) every exchange lands, the learners' weights are
  averaged, the average is evaluated and saved as the epoch's checkpoint (best.pt, last.pt:
  what decoding uses), and every learner goes on from its own weights.

Rank 0 alone writes the training log, plots and the one-model checkpoints.

SIGTERM or SIGUSR1 (preemption, asr/utils/stop.py) stops every learner at a step boundary they
agree on (`stop_agreed`); each saves its part as at train.max_steps (the one model, or every
node its own, after every exchange in flight has landed on both sides, so that the nodes'
weights keep the sum averaging conserves), they wait for each other, and train() raises Preempted: exit 75, and the same
command goes on exactly from there. Only one training runs in an experiment at a time
(`<exp_dir>/train.lock`, held by learner 0 for the whole job).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import resource
import statistics
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf
from torch.utils.data import DataLoader
from tqdm import tqdm

from asr.distributed.build import build_training_updater, step_group
from asr.distributed.claims import BatchClaims, claims_store
from asr.distributed.context import WATCHDOG, DistributedContext, DistributedError, fail_fast, init_distributed
from asr.distributed.flat import averaged_model, set_parameters_
from asr.features.specaugment import SpecAugment
from asr.models.blstm import build_model
from asr.models.checkpoint import CHECKPOINT_FORMAT, CheckpointDir, restore_rng_state, rng_state
from asr.optim.updater import optimizer_moments
from asr.train.chunks import FrameChunks, SampleBatchSampler, check_chunking, window_starts
from asr.train.config import subset_utts
from asr.train.data import (
    Batch,
    BucketBatchSampler,
    ClaimedBatchSampler,
    EpochAugment,
    Prefetcher,
    collate,
    pack_mask,
    unpack_mask,
)
from asr.train.experiment import check_config, restart_experiment, restart_if_inputs_changed, save_config
from asr.train.objectives import build_objective, ctc_loss_sum  # noqa: F401  (ctc_loss_sum: re-exported)
from asr.train.precision import autocast, grad_scaler, training_precision, use_ieee_fp32
from asr.train.record import TrainedRecord
from asr.train.resume import RunLayout, Start, find_start, node_dir
from asr.train.telemetry import Telemetry
from asr.train.trainlog import LogRow, TrainLog
from asr.utils.device import select_device
from asr.utils.errors import InputError
from asr.utils.lock import DirLock
from asr.utils.stop import EXIT_PREEMPTED, Preempted, StopRequest
from asr.utils.threads import torch_threads

log = logging.getLogger(__name__)

# Why a learner that was not signalled itself stops: its stop request then also makes it ignore
# the SIGTERM torchrun sends the remaining workers once the first has exited (StopRequest.uninstall).
PEER_SIGNAL = "another learner's signal"


def to_container(cfg) -> dict:
    """A plain dict of a config node, interpolations resolved (what checkpoints store)."""
    return OmegaConf.to_container(cfg, resolve=True)


NAN = float("nan")
LOCK_NAME = "train.lock"  # in the experiment dir, while a training runs there (asr/utils/lock.py)


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint."""

    step: int = 0  # batches consumed, skipped bad ones included
    epoch: int = 0  # completed epochs, i.e. the index of the epoch being trained
    batches_done: int = 0  # position inside the current plan of the epoch
    elapsed_s: float = 0.0  # training time over all runs
    epoch_loss: float = 0.0  # loss sum and tokens of the current epoch...
    epoch_tokens: int = 0
    window_loss: float = 0.0  # ...and since the last train_log.csv row
    window_tokens: int = 0
    dev_loss: float = NAN  # of the last completed epoch
    best_dev_loss: float = math.inf
    bad_utterances: int = 0  # left out of their step for a non-finite loss

    @classmethod
    def from_checkpoint(cls, saved: dict, source: str) -> "Progress":
        """The progress a checkpoint holds; fields an earlier toolkit kept and this one does
        not (bad_batches: batches dropped whole for a non-finite loss) are left out, named."""
        known = {f.name for f in fields(cls)}
        dropped = sorted(set(saved) - known)
        if dropped:
            log.warning(
                "%s: written by an earlier toolkit; its progress fields %s are no longer kept (ignored)",
                source,
                ", ".join(dropped),
            )
        return cls(**{k: v for k, v in saved.items() if k in known})


def duration(seconds: float) -> str:
    """1h02m, 3m05s, 42s; ? when unknown."""
    if seconds != seconds or math.isinf(seconds):
        return "?"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def mean(loss_sum: float, tokens: int) -> float:
    return loss_sum / tokens if tokens else NAN


class StepTimes:
    """Per-step wall time, and how much of it went to waiting for data and for the weight
    average; written to `<exp_dir>/timing/learner-<rank>.json` at the end of a run."""

    def __init__(self, started: float | None = None):
        self.steps: list[float] = []
        self.data_wait: list[float] = []
        self.utterances = 0
        self.started = started if started is not None else time.perf_counter()  # the train stage's start
        self.startup: float | None = None  # seconds from it to the first batch
        self.startup_peak_mb: float | None = None  # the process's peak memory until then
        self.mark = time.perf_counter()

    def batch_ready(self) -> None:
        now = time.perf_counter()
        self.data_wait.append(now - self.mark)
        if self.startup is None:
            self.startup = now - self.started
            self.startup_peak_mb = peak_resident_mb()

    def step_done(self, utterances: int) -> None:
        now = time.perf_counter()
        self.steps.append(now - self.mark)
        self.utterances += utterances
        self.mark = now

    def restart(self) -> None:
        """After an epoch end: its evaluation is not part of any step."""
        self.mark = time.perf_counter()

    def summary(self, skip: int = 3) -> dict:
        steady = self.steps[skip:] or self.steps
        return {
            "steps": len(self.steps),
            "utterances": self.utterances,
            "train_seconds": round(sum(self.steps), 3),
            "step_seconds_mean": round(statistics.fmean(steady), 5) if steady else None,
            "step_seconds_median": round(statistics.median(steady), 5) if steady else None,
            "data_wait_seconds": round(sum(self.data_wait), 3),
            "startup_seconds": round(self.startup, 4) if self.startup is not None else None,
            "startup_peak_rss_mb": self.startup_peak_mb,
        }


def peak_resident_mb() -> float:
    """The process's peak resident memory so far, in MB (Linux reports ru_maxrss in KB).
    Taken at the first batch it is what a learner holds for the corpus (index, plan, model,
    optimizer), before the batches' activations, which depend on which batches come first."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Trainer:
    def __init__(self, cfg, dist: DistributedContext | None = None):
        self.cfg = cfg
        self.tcfg = cfg.train
        self.exp_dir = Path(cfg.exp_dir)
        self.dist = dist or DistributedContext(device=select_device(cfg.device))
        self.device = self.dist.device
        self.precision = training_precision(self.tcfg.precision, self.device)
        use_ieee_fp32(self.device, self.precision)
        check_chunking(cfg)
        self.objective = build_objective(cfg)
        self.chunked = bool(self.tcfg.chunk_frames)  # fixed-length samples instead of utterances (asr/train/chunks.py)
        started = time.perf_counter()
        self.train_set, self.dev_set = self.datasets()
        if self.chunked:
            self.train_set = FrameChunks(
                self.train_set, self.tcfg.chunk_frames, cfg.model.subsample, cfg.seed, subset_utts(self.tcfg)
            )
        self.datasets_seconds = (
            time.perf_counter() - started
        )  # of the start-up: the sets' index built or mapped, then filtered
        augment = SpecAugment.from_config(cfg.features.specaugment)  # None: off
        self.train_set.reader.augment = EpochAugment(augment, cfg.seed) if augment is not None else None
        if self.dev_set.feat_dim != self.train_set.feat_dim:
            raise InputError(
                f"{self.dev_set.reader.set_dir}: "
                f"feat_dim {self.dev_set.feat_dim} differs from the training set's {self.train_set.feat_dim}"
            )
        torch.manual_seed(cfg.seed)
        self.objective.write_training_files(self.exp_dir, self.train_set)
        self.dev_metrics: dict[str, float] = {}
        num_outputs = self.objective.num_outputs
        self.model_info = {
            "config": to_container(cfg.model),
            "input_dim": self.train_set.feat_dim,
            "num_outputs": num_outputs,
        }
        self.model = build_model(cfg.model, self.train_set.feat_dim, num_outputs).to(self.device)
        self.group = step_group(self.dist, cfg)
        self.layout = RunLayout(self.group.layout is not None, self.dist.world_size, self.group.size)
        self.sampler = self.train_sampler()
        self.num_train_utts = (
            self.sampler.num_samples if self.chunked else len(self.sampler.lengths)
        )  # items: samples when chunked
        self.total_steps = math.ceil(self.sampler.num_batches() / self.group.count) * self.tcfg.epochs
        self.updater = build_training_updater(
            self.model, cfg, self.dist, self.total_steps, grad_scaler(self.precision, self.device)
        )
        self.train_model = self.updater.wrap(self.model)
        if self.dist.distributed:
            torch.manual_seed(cfg.seed + 1000 * self.dist.rank)  # same initial weights, own dropout masks
        self.dev_sampler = BucketBatchSampler(
            self.dev_set.num_frames,
            self.tcfg.max_frames,
            self.tcfg.max_utts,
            shuffle=False,
            num_replicas=self.dist.world_size,
            rank=self.dist.rank,
        )
        self.checkpoints = CheckpointDir(self.exp_dir / "checkpoints", self.tcfg.keep_checkpoints)
        self.claims = self._claims() if self.updater.decentralized else None
        self.node_checkpoints = self._node_checkpoints() if self.updater.decentralized else None
        self.trainlog = TrainLog(self.exp_dir, self.objective.loss_label)
        self.progress = Progress()
        self.plan_done: np.ndarray | None = None  # utterances of the epoch trained before this run's plan
        self.claimed: list[int] = []  # decentralized: the plan's batches this node took
        self.run_steps = 0
        self.stopped = False  # train.max_steps reached before the end of training, or preempted
        self.group_stop = False  # a stop request among this step's gradient group (read with its counts)
        self.pending_loss: torch.Tensor | None = None  # loss sum of the steps since the last host read
        self.stop = StopRequest()  # SIGTERM/SIGUSR1 (installed by train())
        self.preempted = False  # stopped by self.stop: exit EXIT_PREEMPTED once the checkpoint is saved
        self.times = StepTimes()
        self.telemetry = Telemetry(self.exp_dir, self.dist.rank, self.tcfg.tensorboard)
        self.record: TrainedRecord | None = None  # opened once resume() has cut it to its checkpoint
        self.run_start = time.monotonic()
        self.window_started, self.window_frames = time.perf_counter(), 0  # input frames since the last progress line

    def open_record(self) -> None:
        if self.tcfg.record_utterances:
            self.record = TrainedRecord(self.exp_dir, self.dist.rank)

    def close_record(self) -> None:
        if self.record is not None:
            self.record.close()

    def datasets(self):
        """The training and dev sets; learner 0 makes their training index first (if missing)."""
        names = (self.cfg.data.train_set, self.cfg.data.dev_set)
        sets = [self.objective.dataset(name) for name in names] if self.dist.is_writer else None
        self.dist.broadcast_object(None)
        return sets or [self.objective.dataset(name, build=False) for name in names]

    def train_sampler(self):
        """The training plan's sampler: length-bucketed utterances, or fixed-length samples."""
        t, group = self.tcfg, self.group
        if self.chunked:
            return SampleBatchSampler(
                len(self.train_set),
                t.batch_samples,
                seed=self.cfg.seed,
                num_replicas=group.size,
                rank=group.rank,
                window_starts=window_starts(self.train_set, t.shuffle_window_utts),
            )
        lengths = list(self.train_set.num_frames)[: subset_utts(t) or None]
        return BucketBatchSampler(
            lengths,
            t.max_frames,
            t.max_utts,
            seed=self.cfg.seed,
            num_replicas=group.size,
            rank=group.rank,
            window=t.shuffle_window_utts,
        )

    def _claims(self) -> BatchClaims:
        layout = self.group.layout
        control = self.updater.groups.node_claims
        return BatchClaims(
            claims_store(),
            is_leader=layout.is_leader,
            leader=layout.leader_of(layout.node),
            control_group=control,
            rank=self.dist.rank,
            timeout_s=self.dist.timeout_s,
            limit=int(self.tcfg.max_steps),
        )

    def _node_checkpoints(self) -> CheckpointDir | None:
        layout = self.group.layout
        return (
            CheckpointDir(node_dir(self.checkpoints, layout.node), self.tcfg.keep_checkpoints)
            if layout.is_leader
            else None
        )

    # --- state -----------------------------------------------------------------------------

    def resume(self) -> bool:
        """Load where this run starts (False: afresh). No learner returns before every one has
        loaded: ADPSGD's passive servers answer from the start, so an active learner that
        resumed faster would otherwise average with a passive's freshly initialised weights."""
        resumed = self._load_start()
        self.dist.barrier("waiting for every learner to load its checkpoint")
        return resumed

    def _load_start(self) -> bool:
        every = int(self.tcfg.checkpoint_every_steps)
        start = find_start(self.checkpoints, self.dist, self.layout, self.num_train_utts, every)
        if start.kind == "fresh":
            if self.dist.is_writer:
                self.trainlog.truncate_after(0)  # rows of a run stopped before its first checkpoint
            return False
        state = start.state
        try:
            with self.updater.changing_weights():  # ADPSGD: a passive's server may already read them
                self.model.load_state_dict(state["model"])
            self.updater.load_state_dict(state["updater"])
        except (RuntimeError, ValueError, KeyError) as err:
            raise InputError(
                f"{start.source}: checkpoint does not fit the configured model ({str(err).splitlines()[0]}); "
                "use a new exp_name for a different model"
            ) from None
        self.progress = Progress.from_checkpoint(state["progress"], str(start.source))
        if start.kind == "exact":
            self.plan_done = _unpacked_done(state, self.num_train_utts)
            self._restore_rng(state)
        else:
            self._continue_in_new_plan(start)
        if self.dist.is_writer:
            self.trainlog.truncate_after(self.progress.step)
        where = (
            f"batch {self.progress.batches_done}"
            if start.kind == "exact"
            else f"{int(start.done.sum())} of its {'samples' if self.chunked else 'utterances'} trained"
        )
        log.info(
            "resumed from step %d (epoch %d, %s; %s start from %s)",
            self.progress.step,
            self.progress.epoch + 1,
            where,
            start.kind,
            start.source,
        )
        return True

    def _restore_rng(self, state: dict) -> None:
        by_rank = state.get("distributed", {}).get("rng_by_rank")
        if by_rank and len(by_rank) == self.dist.world_size:
            restore_rng_state(by_rank[self.dist.rank])
        elif self.dist.rank == 0:
            restore_rng_state(state["rng"])

    def _continue_in_new_plan(self, start: Start) -> None:
        """own/replan: what is left of the epoch becomes a new plan for this run's learners."""
        p = self.progress
        p.batches_done = 0
        self.plan_done = start.done
        if start.kind == "own":
            by_local = start.state["distributed"].get("rng_by_local") or []
            if len(by_local) == self.group.size:
                restore_rng_state(by_local[self.group.rank])
            return
        # replan: another number of learners, so another number of steps per epoch; the
        # schedule goes on from the share of the training done, and every learner draws anew.
        done = (p.epoch + float(start.done.mean())) / self.tcfg.epochs
        self.updater.schedule.load_state_dict({"steps": round(done * self.total_steps), "epochs": p.epoch})
        torch.manual_seed(self.cfg.seed + 1000 * self.dist.rank + 7919 * (p.step + 1))

    def elapsed(self) -> float:
        return self.progress.elapsed_s + time.monotonic() - self.run_start

    def sampler_state(self) -> dict:
        """The epoch's plan and how far this learner got in it."""
        p = self.progress
        # A batch is trained once its step is applied, not when it is claimed: the batches
        # claimed ahead (being read) go back to the plan on resume. The loader and the
        # prefetcher hand batches over in claim order, so these are the first batches_done.
        batches = self.claimed[: p.batches_done] if self.updater.decentralized else range(p.batches_done)
        trained = self.sampler.trained(p.epoch, self.plan_done, list(batches))
        done = self.plan_done if self.plan_done is not None else np.zeros(self.num_train_utts, dtype=bool)
        return {
            "epoch": p.epoch,
            "batches_done": p.batches_done,
            "num_utts": self.num_train_utts,
            "done": pack_mask(done),
            "trained": pack_mask(trained),
        }

    def state(
        self, model_state: dict | None = None, updater_state: dict | None = None, rngs: dict | None = None
    ) -> dict:
        p = self.progress
        progress = asdict(p) | {"elapsed_s": self.elapsed()}
        return {
            "format": CHECKPOINT_FORMAT,
            "model": model_state if model_state is not None else self.model.state_dict(),
            "model_info": self.model_info,
            "updater": updater_state if updater_state is not None else self.updater.state_dict(),
            "sampler": self.sampler_state(),
            "rng": rng_state(),
            "step": p.step,
            "epoch": p.epoch,
            "progress": progress,
            "config": to_container(self.cfg),
            "layout": self.layout.as_dict(),
            "distributed": {"algorithm": self.dist.algorithm, "world_size": self.dist.world_size, **(rngs or {})},
        }

    def save_checkpoint(self) -> Path | None:
        """SSGD and one learner: every learner calls it (a collective), rank 0 writes the one
        model. Decentralized: the node's leader writes its node's own state, no collective
        beyond the node."""
        self.read_losses()
        if self.updater.decentralized:
            return self.save_node_checkpoint()
        rngs = {"rng_by_rank": self.dist.gather_objects(rng_state())}
        state = self.state(rngs=rngs)
        return self.checkpoints.save(state) if self.dist.is_writer else None

    def save_node_checkpoint(self) -> Path | None:
        self.read_losses()
        self.updater.quiesce()
        rngs = {"rng_by_local": self.updater.gather_in_node(rng_state())}
        if self.node_checkpoints is None:
            return None
        state = self.state(rngs=rngs)
        state["layout"] = self.layout.as_dict() | {"node": self.group.layout.node}
        return self.node_checkpoints.save(state)

    # --- training --------------------------------------------------------------------------

    def loader(self, dataset, sampler) -> DataLoader:
        # Own generator: creating an iterator must not draw from the global RNG, or a resumed
        # run's dropout masks would differ from the uninterrupted run's.
        generator = torch.Generator().manual_seed(self.cfg.seed)
        return DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=collate,
            num_workers=self.tcfg.num_workers,
            generator=generator,
            pin_memory=self.device.type == "cuda",
        )

    def run(self) -> Path | None:
        epochs = self.tcfg.epochs
        log.info("training on %s in %s", self.device, self.precision)
        while self.progress.epoch < epochs:
            self.train_epoch()
            if self.stopped:
                return self.stop_early()
            self.finish_epoch()
        if not self.dist.is_writer:
            return self.checkpoints.last
        self.checkpoints.copy_to(self.checkpoints.periodic()[-1], self.checkpoints.last)
        log.info(
            "training complete after %d epochs: %s (best dev loss %.4f: %s)",
            epochs,
            self.checkpoints.last,
            self.progress.best_dev_loss,
            self.checkpoints.best,
        )
        return self.checkpoints.last

    def stop_early(self) -> None:
        """train.max_steps reached or a stop requested: save where this run got to, so the
        next one goes on exactly from there."""
        if self.updater.decentralized:
            self.updater.settle("before saving the node checkpoints")
        self.save_checkpoint()
        if self.preempted:
            # Every learner's part is saved before any exits: torchrun ends the others when the
            # first worker exits, which must not cut a node's checkpoint short.
            self.dist.broadcast_object(None)
            log.warning(
                "stopped by %s at step %d, epoch %d, after saving a checkpoint; "
                "the same command goes on from here (exit %d)",
                self.stop.signal_name,
                self.progress.step,
                self.progress.epoch + 1,
                EXIT_PREEMPTED,
            )
            return None
        log.info(
            "stopped after %d steps of this run (train.max_steps=%d) at step %d, epoch %d; "
            "the same command goes on from here",
            self.run_steps,
            self.tcfg.max_steps,
            self.progress.step,
            self.progress.epoch + 1,
        )
        return None

    def train_epoch(self) -> None:
        p = self.progress
        self.sampler.set_epoch(p.epoch, start=p.batches_done, done=self.plan_done)
        total = self.sampler.num_batches()
        batches = self.sampler
        if self.claims is not None:
            self.claims.start_epoch(p.epoch)
            batches = ClaimedBatchSampler(self.sampler, self.claims)
            self.claimed = batches.claimed
        bar = tqdm(
            total=total,
            initial=p.batches_done,
            desc=f"epoch {p.epoch + 1}/{self.tcfg.epochs}",
            disable=None if self.dist.is_writer else True,  # only on a terminal; elsewhere log_progress writes lines
            leave=False,
            dynamic_ncols=True,
        )
        if self.train_set.reader.augment is not None:
            self.train_set.reader.augment.epoch = p.epoch
        if self.chunked:
            self.train_set.set_epoch(p.epoch)
        self.model.train()
        self.times.restart()
        self.window_started, self.window_frames = time.perf_counter(), 0  # frames/s of training steps, not evaluation
        prefetched = Prefetcher(self.loader(self.train_set, batches), self.read_ahead())
        WATCHDOG.stepping = True  # collectives from here on are bounded relative to the steps
        try:
            self.train_batches(prefetched, bar, total)
        finally:
            WATCHDOG.stepping = False
            prefetched.close()
        if self.claims is not None:
            # A node that used up the plan before another published its stop must stop too, or
            # it would wait for the others at the epoch end's average: all learners agree here
            # (every one ends its plan, by the plan's end, the run's limit or the stop).
            stop = self.claims.stop_seen or self.stop.requested
            stops, limits = self.dist.all_reduce_sum([float(stop), float(self.claims.limit_reached)])
            self.preempted = stops > 0
            if self.preempted:
                self.stop.request(PEER_SIGNAL)
            self.stopped = limits > 0 or self.preempted
        bar.close()

    def read_ahead(self) -> int:
        """Batches read while a step runs. Under claims one: a batch read ahead is claimed, and
        one a faster node could have taken (at an epoch end everybody waits for it); reading one
        batch during a step already hides reading whenever it is faster than a step."""
        return 1 if self.claims is not None else self.tcfg.prefetch_batches

    def train_batches(self, batches, bar, total: int) -> None:
        p = self.progress
        for batch in batches:
            self.times.batch_ready()
            comm_before = self.updater.comm_wait_s
            self.train_batch(batch)
            p.step += 1
            p.batches_done += 1
            if self.record is not None:
                self.record.step(p.epoch + 1, p.step, batch.utts)
            self.run_steps += 1
            self.times.step_done(len(batch.utts))
            WATCHDOG.step_done(p.step, self.times.steps[-1])
            self.telemetry.add_step(
                int(batch.feat_lens.sum()), self.times.data_wait[-1], self.updater.comm_wait_s - comm_before
            )
            bar.update(self._claimed_so_far() - bar.n if self.claims is not None else 1)
            self.window_frames += int(batch.feat_lens.sum())
            if p.step % self.tcfg.log_every_steps == 0:
                row = self.log_row(epoch=p.epoch + 1)
                bar.set_postfix(loss=f"{row.train_loss:.3f}", lr=f"{self.updater.lr:.2e}")
                if bar.disable and self.dist.is_writer:
                    self.log_progress(row)
            if p.step % self.tcfg.checkpoint_every_steps == 0 and (self.claims is not None or p.batches_done < total):
                self.save_checkpoint()
            if self.stop_agreed():
                self.stopped = self.preempted = True
                self.stop.request(PEER_SIGNAL)  # this learner may not have been signalled itself
                return
            if self.claims is None and self.tcfg.max_steps and self.run_steps >= self.tcfg.max_steps:
                self.stopped = p.batches_done < total or p.epoch + 1 < self.tcfg.epochs
                return
        # SSGD read the last step's stop requests before its backward: one that came later is
        # agreed on here, before the epoch end's evaluation
        if self.claims is None and self.dist.distributed and not self.stopped and self.stop_agreed(now=True):
            self.stopped = self.preempted = True
            self.stop.request(PEER_SIGNAL)

    def log_progress(self, row: LogRow) -> None:
        """A plain log line in place of the progress bar when stderr is not a terminal (a
        SLURM log, nohup, a pipe): without it such a log shows one line per epoch."""
        now = time.perf_counter()
        seconds = now - self.window_started
        frames_per_s = self.window_frames / seconds if seconds > 0 else NAN
        self.window_started, self.window_frames = now, 0
        # ETA from this run's mean step time (epoch-end evaluations included) over the steps left.
        run_seconds = time.monotonic() - self.run_start
        left = max(self.total_steps - self.progress.step, 0)
        eta = run_seconds / self.run_steps * left if self.run_steps else NAN
        log.info(
            "step %d/%d epoch %d/%d: loss %.4f, lr %.3g, %.0f frames/s, ETA %s",
            self.progress.step,
            self.total_steps,
            row.epoch,
            self.tcfg.epochs,
            row.train_loss,
            row.lr,
            frames_per_s,
            duration(eta),
        )

    def stop_agreed(self, now: bool = False) -> bool:
        """Whether every learner stops after this step. One learner: its own signal. SSGD: the
        sum over the learners read with the step's token counts (they step together, so all see
        it at the same step, and none is left waiting in the next all-reduce); `now`: a sum of
        its own (at the end of the batches). Decentralized: the signal is published in the
        claims store, every node's next claim sees it and its plan ends there, as at
        train.max_steps; the nodes then save their own checkpoints (train_epoch)."""
        if self.claims is not None:
            if self.stop.requested:
                self.claims.request_stop()
            return False
        if not self.dist.distributed:
            return self.stop.requested
        if now:
            return self.dist.all_reduce_sum([float(self.stop.requested)])[0] > 0
        return self.group_stop

    def _claimed_so_far(self) -> int:
        return (max(self.claimed) + 1) if self.claimed else 0

    def train_batch(self, batch: Batch) -> None:
        batch = batch.to(self.device, non_blocking=True)
        self.updater.begin_step()  # ADPSGD: the weight exchange runs during forward and backward
        losses, counts = self.forward_losses(batch)
        # The step's one host read: this learner's token count and non-finite losses, and their
        # sums over its gradient group with the stop requests (SSGD: every learner's).
        (tokens, bad, _), (total, any_bad, stops) = self.updater.count_sums(self.step_counts(losses, counts))
        self.group_stop = stops > 0
        factor = self.updater.gradient_factor(tokens, total, 0.0)
        if any_bad > 0:  # rare: the learners with non-finite losses train without those utterances
            losses, tokens, factor = self.without_bad_utterances(batch, losses, counts, bad > 0)
            if losses is None:
                self.updater.skip_batch()  # other learners still count on this one's part
                return
        loss_sum = losses.sum()
        self.updater.step(loss_sum / max(tokens, 1), factor=factor)
        self.pending_loss = loss_sum.detach().double() + (self.pending_loss if self.pending_loss is not None else 0)
        p = self.progress
        p.epoch_tokens += int(tokens)
        p.window_tokens += int(tokens)

    def step_counts(self, losses: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """[tokens, non-finite losses, stop requested] on the losses' device (read by count_sums)."""
        stop = torch.tensor(float(self.stop.requested), dtype=torch.float64).to(losses.device, non_blocking=True)
        return torch.stack([counts.sum().double(), (~torch.isfinite(losses.detach())).sum().double(), stop])

    def without_bad_utterances(self, batch: Batch, losses, counts, bad: bool):
        """(losses, tokens, factor) once the learners with non-finite losses have left those
        utterances out and run the rest again (losses None: nothing usable here); the group's
        counts are summed again, so every learner of it agrees on the factor."""
        if bad:
            finite = torch.isfinite(losses.detach())
            self.record_bad_utterances(batch, ~finite)
            keep = finite.cpu().tolist()
            batch = batch.subset(keep) if any(keep) else None
            losses, counts = self.forward_losses(batch) if batch is not None else (None, None)
            if losses is not None and not torch.isfinite(losses.detach()).all():
                losses = None
        tokens = float(counts.sum()) if losses is not None else 0.0
        local = torch.tensor([tokens, 0.0 if losses is not None else 1.0], dtype=torch.float64)
        _, (total, unusable) = self.updater.count_sums(local)
        return losses, tokens, self.updater.gradient_factor(tokens, total, unusable)

    def read_losses(self) -> None:
        """Fold the device's loss sum of the steps since the last read into the progress counts:
        a host read at log rows, epoch ends and checkpoints, not every step."""
        if self.pending_loss is None:
            return
        value, self.pending_loss = float(self.pending_loss), None
        self.progress.epoch_loss += value
        self.progress.window_loss += value

    def forward_losses(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        with autocast(self.device, self.precision):
            log_probs, out_lens = self.train_model(batch.feats, batch.feat_lens)
        return self.objective.utterance_losses(log_probs, out_lens, batch)

    def record_bad_utterances(self, batch: Batch, bad: torch.Tensor) -> None:
        """Leave them out of this step (the rest of the batch is trained again without them),
        and name them so the data can be inspected."""
        names = [utt for utt, b in zip(batch.utts, bad.tolist()) if b]
        self.progress.bad_utterances += len(names)
        line = (
            f"step {self.progress.step} epoch {self.progress.epoch + 1}: non-finite loss, left out: {' '.join(names)}"
        )
        if not self.dist.is_writer:  # only rank 0 writes files; the ids go to this learner's log
            log.warning("learner %d: %s", self.dist.rank, line)
            return
        path = self.exp_dir / "bad_utterances.txt"
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
        log.warning(
            "step %d: non-finite loss for %d of %d utterances, trained without them (ids in %s)",
            self.progress.step,
            len(names),
            len(batch.utts),
            path,
        )

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module | None = None) -> float:
        """The objective's loss per token (CTC) or frame (CE) on the dev set (dropout off);
        its other statistics (CE: frame accuracy) go to self.dev_metrics. Learners evaluate
        their shares of the dev set with the same weights (`model`: the training model's)."""
        model = model if model is not None else self.model
        was_training = model.training
        model.eval()
        loss_sum, tokens = 0.0, 0
        stats: dict[str, float] = {}
        for batch in self.loader(self.dev_set, self.dev_sampler):
            batch = batch.to(self.device)
            with autocast(self.device, self.precision):
                log_probs, out_lens = model(batch.feats, batch.feat_lens)
            losses, counts = self.objective.utterance_losses(log_probs, out_lens, batch)
            finite = torch.isfinite(losses)
            if not finite.all():
                log.warning(
                    "dev set: non-finite loss for %s; left out of the dev loss",
                    [u for u, ok in zip(batch.utts, finite.tolist()) if not ok],
                )
            loss_sum += float(losses[finite].sum())
            tokens += int(counts[finite].sum())
            for key, value in self.objective.eval_stats(log_probs, out_lens, batch).items():
                stats[key] = stats.get(key, 0.0) + value
        model.train(was_training)
        keys = sorted(stats)
        loss_sum, tokens, *values = self.dist.all_reduce_sum([loss_sum, tokens] + [stats[k] for k in keys])
        self.dev_metrics = self.objective.metrics(dict(zip(keys, values)))
        return mean(loss_sum, int(tokens))

    # --- logging and epoch ends --------------------------------------------------------------

    def log_row(self, epoch: int, dev_loss: float = NAN) -> LogRow:
        """A train_log.csv row for the steps since the previous one (`epoch` 1-based); the
        train loss is rank 0's own (no collective between epoch ends)."""
        self.read_losses()
        self.updater.report_skipped()
        p = self.progress
        row = LogRow(
            p.step, epoch, mean(p.window_loss, p.window_tokens), dev_loss, self.updater.lr, round(self.elapsed(), 1)
        )
        if self.dist.is_writer:
            self.trainlog.append(row)
        if dev_loss != dev_loss:  # a row of the steps, not an epoch end
            self.telemetry.row(p.step, row.train_loss, row.lr)
        p.window_loss, p.window_tokens = 0.0, 0
        return row

    def finish_epoch(self) -> None:
        if self.updater.decentralized:
            self.claims.end_epoch(len(self.sampler.global_batches(self.progress.epoch, self.sampler.done)))
            average = self.updater.average_for_epoch_end()
            model = averaged_model(self.model, average.weights)
            dev_loss = self.evaluate(model)
            saved = {"model_state": model.state_dict(), "updater_state": self.averaged_updater_state(average.moments)}
            spread = average.spread
        else:
            dev_loss, saved, spread = self.evaluate(self.model), {}, 0.0
        p = self.progress
        self.read_losses()
        epoch_loss, epoch_tokens = self.dist.all_reduce_sum([p.epoch_loss, p.epoch_tokens])
        train_loss = mean(epoch_loss, int(epoch_tokens))
        self.updater.end_epoch()
        improved = dev_loss < p.best_dev_loss
        p.epoch += 1
        p.batches_done = 0
        p.epoch_loss, p.epoch_tokens = 0.0, 0
        p.dev_loss = dev_loss
        p.best_dev_loss = min(p.best_dev_loss, dev_loss)
        self.plan_done, self.claimed = None, []
        self.log_row(epoch=p.epoch, dev_loss=dev_loss)
        self.telemetry.epoch(
            p.step, {"train_loss": train_loss, "dev_loss": dev_loss, "weights_spread": spread, **self.dev_metrics}
        )
        path = self.save_epoch_checkpoints(saved)
        self.times.restart()
        if path is None:
            return
        if improved:
            self.checkpoints.copy_to(path, self.checkpoints.best)
        self.checkpoints.keep_epoch_end(path, p.epoch, self.tcfg.keep_epoch_checkpoints)
        if self.tcfg.plot:
            self.trainlog.plot()
        log.info(
            "epoch %d/%d: train loss %.4f, dev loss %.4f%s%s, lr %.3g, %d steps, %.0f s%s",
            p.epoch,
            self.tcfg.epochs,
            train_loss,
            dev_loss,
            " (best)" if improved else "",
            "".join(f", dev {name.replace('_', ' ')} {value:.4f}" for name, value in self.dev_metrics.items()),
            self.updater.lr,
            p.step,
            self.elapsed(),
            f"; learners' spread before averaging {spread:.3g} (max |w_i - mean| / |mean|)"
            if self.updater.decentralized
            else "",
        )

    def save_epoch_checkpoints(self, saved: dict) -> Path | None:
        """The epoch's one-model checkpoint (rank 0's path), and under decentralized training
        every node's own state."""
        if not self.updater.decentralized:
            return self.save_checkpoint()
        self.save_node_checkpoint()
        if not self.dist.is_writer:
            return None
        return self.checkpoints.save(self.state(**saved))

    def averaged_updater_state(self, moments: torch.Tensor | None) -> dict:
        """This learner's updater state with the learners' mean optimizer moments."""
        state = copy.deepcopy(self.updater.state_dict())
        if moments is None:
            return state
        holder = copy.deepcopy(self.updater.optimizer)
        set_parameters_(optimizer_moments(holder), moments)
        state["optimizer"] = holder.state_dict()
        return state

    def exchange_role(self) -> str | None:
        """ADPSGD/H-ADPSGD: active (starts the exchanges), passive (serves them) or alone (one
        node); None where learners do not exchange weights."""
        layout = getattr(self.updater, "layout", None) if self.updater.decentralized else None
        return layout.role if layout is not None else None

    def write_timing(self) -> None:
        summary = self.times.summary() | {
            "rank": self.dist.rank,
            "algorithm": self.dist.algorithm,
            "world_size": self.dist.world_size,
            "role": self.exchange_role(),
        }
        summary["exchanges"] = getattr(self.updater, "exchanges", 0)
        summary["communication_wait_seconds"] = round(self.updater.comm_wait_s, 3)
        summary["startup_datasets_seconds"] = round(self.datasets_seconds, 4)
        path = self.exp_dir / "timing" / f"learner-{self.dist.rank}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=1) + "\n")


def _unpacked_done(state: dict, num_utts: int) -> np.ndarray | None:
    packed = state["sampler"].get("done")
    return None if packed is None else unpack_mask(packed, num_utts)


def train(cfg) -> Path | None:
    """The train stage: returns the path of the final checkpoint (`checkpoints/last.pt`), or
    None when train.max_steps stopped it before the end; raises Preempted when a signal did
    (after the checkpoint is saved)."""
    if cfg.train.epochs < 1:
        raise InputError(f"train.epochs={cfg.train.epochs}: train for at least one epoch")
    started = time.perf_counter()
    with torch_threads(cfg.train.threads):
        return _train_on_threads(cfg, started)


def _train_on_threads(cfg, started: float) -> Path | None:
    exp_dir = Path(cfg.exp_dir)
    stop = StopRequest().install()  # before anything slow: a signal during start-up stops at the first step
    dist = init_distributed(cfg)
    # One training per experiment: learner 0 holds the lock for the job (learners of one job
    # never refuse each other), and train.restart moves nothing while another run holds it.
    lock = DirLock(exp_dir / LOCK_NAME, f"training of {exp_dir}")
    try:
        refused = ""
        if dist.is_writer:
            try:
                lock.acquire()
                restart_if_inputs_changed(exp_dir, cfg)
            except InputError as err:
                refused = str(err)
        refused = dist.broadcast_object(refused)
        if refused:
            raise InputError(refused)
        if cfg.train.restart and dist.is_writer:
            restart_experiment(exp_dir)
        dist.broadcast_object(None)  # every learner sees the experiment as rank 0 left it
        check_config(exp_dir, cfg, force=cfg.train.force)
        trainer = Trainer(cfg, dist)
        trainer.stop = stop
        trainer.times.started = started
        trainer.resume()
        trainer.open_record()
        if dist.is_writer:
            save_config(exp_dir, cfg)  # only now is it true that this config trains here
        if trainer.progress.epoch >= cfg.train.epochs and trainer.checkpoints.last.is_file():
            log.info("%s: already trained for %d epochs; skipping", trainer.checkpoints.last, trainer.progress.epoch)
            last = trainer.checkpoints.last
        else:
            last = trainer.run()
            trainer.write_timing()
        trainer.telemetry.close()
        trainer.close_record()
        trainer.updater.close()
    except BaseException as err:
        if dist.distributed or isinstance(err, DistributedError):
            lock.release()
            fail_fast(err)  # threads may be blocked in a receive: exit now, with the reason, never hang
        raise
    finally:
        stop.uninstall()
        lock.release()
    dist.close()
    if trainer.preempted:
        raise Preempted(f"{exp_dir}: stopped by {stop.signal_name}; checkpoint saved, run the same command to go on")
    return last
