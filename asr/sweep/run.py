"""One run of the batch-size sweep: an algorithm at a global batch and an lr with one seed,
trained with simulated learners on a clock (asr/distributed/timed.py), or the single-learner
baseline.

The seed picks the data order and the learners' speeds, and the initial weights unless
sweep.same_init (then they are the experiment's `seed`'s for every run). The global batch
is `learners` x the per-learner batch, in utterances (the batch's frame limit never binds), or
with train.chunk_frames > 0 (frame_ce, the paper's regime) in fixed-length samples of the
sweep's first max_train_utts utterances (asr/train/chunks.py: each run cuts them at offsets
drawn from its seed, shuffled over the whole set), as many as a multiple of every batch of the
sweep, so every run's epoch is the same full batches. The epoch's global batches are
length-bucketed (utterances) or drawn (samples) as the real trainer's are and dealt out to the
learners by stride, and a node claims one global batch's shards of its learners at a time. The
training config is the experiment's `train` with sweep.train's overrides (`train_config`), the
run's lr (times a control's lr factor) reached by a warm-up over sweep.warmup_epochs. The
held-out loss is the objective's loss on the dev set with the learners' average after each
epoch (with samples: on the dev set's samples, cut once from the experiment's seed, the loss
the runs train on; the real trainer scores whole dev utterances instead); a run whose held-out
loss is not finite or above the untrained model's has diverged and stops there.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from dataclasses import asdict, dataclass

import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from asr.distributed.flat import averaged_model
from asr.distributed.timed import TimedSimulation, Timing
from asr.models.blstm import build_model
from asr.optim.schedule import lr_for_batch
from asr.sweep.batched import StackedModels, batchable
from asr.sweep.config import parse_algorithm
from asr.sweep.noise_scale import measure as measure_noise_scale
from asr.sweep.verdict import BASELINE
from asr.train.chunks import FrameChunks, SampleBatchSampler, check_chunking
from asr.train.data import BucketBatchSampler, collate
from asr.train.objectives import build_objective
from asr.train.precision import use_ieee_fp32
from asr.utils.device import flush_denormals, select_device
from asr.utils.errors import InputError
from asr.utils.memory import freeze_imports, import_optimizer_machinery

log = logging.getLogger(__name__)

EVAL_BATCH = 32  # utterances per held-out batch
EVAL_SAMPLES = 512  # fixed-length samples per held-out batch


def start_process(threads: int) -> None:
    """What a process that trains sweep runs does before torch computes anything: its imports
    left out of the garbage collector's passes, subnormal floats flushed to zero (a run at a large
    lr saturates the LSTM's gates, whose subnormal values the CPU computes many times slower),
    and its number of threads."""
    import_optimizer_machinery()
    freeze_imports()
    flush_denormals()
    torch.set_num_threads(threads)


@dataclass(frozen=True)
class RunSettings:
    """What identifies a run (a finished run with the same settings is not trained again)."""

    algorithm: str  # a sweep algorithm, or BASELINE
    global_batch: int
    learners: int
    learners_per_node: int
    seed: int  # data order and timing
    init_seed: int  # initial weights
    lr: float
    epochs: int
    warmup_epochs: float
    train: dict  # the training config (train_config), any of whose settings may change the result
    model: dict
    timing: dict
    max_train_utts: int
    # passes over the training samples per epoch (sweep.budget=updates: batch / base_batch, so
    # every run takes the baseline's updates per epoch); 1 is left out of the key, so runs made
    # before the budget existed still count
    passes: int = 1

    @property
    def per_learner_batch(self) -> int:
        return self.global_batch // self.learners

    def key(self) -> dict:
        key = asdict(self)
        if key["passes"] == 1:
            del key["passes"]
        key["train"] = result_settings(key["train"])
        return key


# train.* keys that change how fast a run goes, not its result: a sweep resumed on another
# machine (more cores, or a GPU) finds its earlier runs
EXECUTION_KEYS = ("threads",)


def result_settings(train: dict) -> dict:
    return {k: v for k, v in train.items() if k not in EXECUTION_KEYS}


SWEEP_SETS = ("lr", "lr_scaling", "warmup_steps")  # per run, by the sweep


def train_config(cfg) -> DictConfig:
    """The experiment's `train` with sweep.train's overrides; the lr is set per run."""
    overrides = OmegaConf.to_container(cfg.sweep.train, resolve=True)
    for key in SWEEP_SETS:
        if key in overrides:
            raise InputError(
                f"sweep.train.{key}: the sweep sets it for every run; use sweep.baseline_lrs, sweep.critical_lrs, "
                "sweep.lr_scaling or sweep.warmup_epochs instead"
            )
    try:
        merged = OmegaConf.merge(cfg.train, overrides)
    except OmegaConfBaseException as err:
        raise InputError(f"sweep.train: {str(err).splitlines()[0]}; give keys and values of train.*") from None
    return OmegaConf.merge(merged, {"lr_scaling": "none"})


def run_train(cfg) -> dict:
    """What of the training config identifies a run (its lr and warm-up are the run's own)."""
    train = OmegaConf.to_container(train_config(cfg), resolve=True)
    return {k: v for k, v in train.items() if k not in ("lr", "warmup_steps")}


def with_train_config(cfg) -> DictConfig:
    """The experiment's config with its `train` replaced by the sweep's (the objective and its
    datasets read it)."""
    out = copy.deepcopy(cfg)
    out.train = train_config(cfg)
    return out


def scaled_lr(scfg, best_lr: float, global_batch: int) -> float:
    return lr_for_batch(best_lr, global_batch / scfg.base_batch, scfg.lr_scaling)


def run_settings(cfg, algorithm: str, global_batch: int, lr: float, seed: int) -> RunSettings:
    scfg = cfg.sweep
    baseline = algorithm == BASELINE
    learners = 1 if baseline else int(scfg.learners)
    timing = (
        {}
        if baseline
        else {
            "speeds": [float(s) for s in scfg.speeds],
            "speed_spread": float(scfg.speed_spread),
            "jitter": float(scfg.jitter),
            "exchange_time": float(scfg.exchange_time),
        }
    )
    return RunSettings(
        algorithm=algorithm,
        global_batch=int(global_batch),
        learners=learners,
        learners_per_node=int(scfg.learners_per_node) if algorithm.startswith("hadpsgd") else 1,
        seed=int(seed),
        init_seed=int(cfg.seed) if scfg.same_init else int(seed),
        lr=float(lr),
        epochs=int(scfg.epochs),
        warmup_epochs=float(scfg.warmup_epochs),
        train=run_train(cfg),
        model=model_config(cfg),
        timing=timing,
        max_train_utts=int(scfg.max_train_utts),
        passes=passes_per_epoch(scfg, int(global_batch)),
    )


def passes_per_epoch(scfg, global_batch: int) -> int:
    """sweep.budget=epochs: one pass over the samples per epoch whatever the batch; updates:
    batch / base_batch passes, so every run makes the baseline's number of updates per epoch."""
    if scfg.budget == "epochs" or global_batch == scfg.base_batch:
        return 1
    if global_batch % scfg.base_batch:
        raise InputError(
            f"sweep.budget=updates: global batch {global_batch} is not a multiple of sweep.base_batch="
            f"{scfg.base_batch}; choose batches that are"
        )
    return global_batch // scfg.base_batch


def model_config(cfg) -> dict:
    model = OmegaConf.to_container(cfg.model, resolve=True)
    for key in ("num_layers", "hidden_size"):
        if cfg.sweep[key]:
            model[key] = int(cfg.sweep[key])
    return model


def sweep_batches(scfg) -> list[int]:
    return sorted({int(scfg.base_batch), int(scfg.critical_batch), *(int(b) for b in scfg.global_batches)})


class SweepData:
    """The training and held-out sets, loaded once for all runs: utterances, or with
    train.chunk_frames > 0 fixed-length samples (`chunked`)."""

    def __init__(self, cfg):
        check_chunking(cfg)
        self.device = select_device(str(cfg.device))
        use_ieee_fp32(self.device, "fp32")  # the sweep trains in fp32 wherever it runs
        self.objective = build_objective(cfg)
        self.train = self.objective.dataset(cfg.data.train_set)
        self.dev = self.objective.dataset(cfg.data.dev_set)
        limit = int(cfg.sweep.max_train_utts)
        self.chunked = bool(cfg.train.chunk_frames)
        self.batched_nodes = bool(cfg.sweep.batched_nodes)
        if self.chunked:
            chunk, subsample = int(cfg.train.chunk_frames), int(cfg.model.subsample)
            self.train = FrameChunks(self.train, chunk, subsample, int(cfg.seed), limit)
            self.dev = FrameChunks(self.dev, chunk, subsample, int(cfg.seed))
            self.num_utts = self.train.num_utts
            unit = math.lcm(*sweep_batches(cfg.sweep))
            self.num_items = len(self.train) // unit * unit  # the samples of the first utterances: every batch full
            if not self.num_items:
                raise InputError(
                    f"{len(self.train)} samples of {chunk} frames from {self.num_utts} utterances "
                    f"(sweep.max_train_utts) are fewer than one batch of {unit}; "
                    "raise sweep.max_train_utts or lower the global batches"
                )
            self.dropped = len(self.train) - self.num_items
            # the training loss's slice: samples cut once from the experiment's seed, as the dev set's
            self.train_slice = FrameChunks(self.train.utterances, chunk, subsample, int(cfg.seed), limit)
            self.slice_items = evenly_spaced(len(self.train_slice), len(self.dev))
        else:
            self.train_index = list(range(len(self.train)))[: limit or None]
            self.lengths = [self.train.num_frames[i] for i in self.train_index]
            self.num_utts = self.num_items = len(self.train_index)
            self.dropped = 0
            self.train_slice = self.train
            self.slice_items = [self.train_index[i] for i in evenly_spaced(len(self.train_index), len(self.dev))]

    def sampler(self, per_learner_batch: int, learners: int, seed: int):
        """The run's batches: per learner `per_learner_batch` utterances (length-bucketed) or samples."""
        if self.chunked:
            self.train.set_seed(seed)
            return SampleBatchSampler(self.num_items, per_learner_batch, seed=seed, num_replicas=learners)
        return BucketBatchSampler(
            self.lengths, per_learner_batch * max(self.lengths), per_learner_batch, seed=seed, num_replicas=learners
        )

    def gradients_fn(self, model):
        """The nodes' steps batched (sweep.batched_nodes) where the samples have one length and
        the model allows it; else None (each node alone)."""
        if not self.batched_nodes:
            return None
        reason = batchable(model) if self.chunked else "whole utterances differ in length (train.chunk_frames=0)"
        if reason is not None:
            log.info("sweep.batched_nodes: each node's steps alone: %s", reason)
            return None
        return self.batched_gradients

    def set_epoch(self, epoch: int) -> None:
        if self.chunked:
            self.train.set_epoch(epoch)  # the samples' offsets this epoch

    def batch(self, shards):
        """The union of a node's shards (lists of positions), collated on the device."""
        if self.chunked:
            batch = collate(self.train.__getitems__([int(i) for shard in shards for i in shard]))
        else:
            batch = collate([self.train[self.train_index[i]] for shard in shards for i in shard])
        return batch.to(self.device)

    def loss(self, model, shards) -> tuple[torch.Tensor, int]:
        """The summed loss and its count over the union of a node's shards."""
        batch = self.batch(shards)
        log_probs, out_lens = model(batch.feats, batch.feat_lens)
        return self.objective.loss(log_probs, out_lens, batch)

    def batched_gradients(self, models, node_shards) -> list[tuple[torch.Tensor, int]]:
        """Several nodes' steps as one (asr/sweep/batched.py): each model's .grad set to the
        gradient of its mean loss; their summed losses and counts."""
        batches = [self.batch(shards) for shards in node_shards]
        stacked = StackedModels(models)
        log_probs, out_lens = stacked.forward(torch.stack([b.feats for b in batches]), batches[0].feat_lens)
        results = [self.objective.loss(log_probs[n], out_lens, b) for n, b in enumerate(batches)]
        means = [loss / max(count, 1) for loss, count in results if torch.isfinite(loss)]
        if means:
            torch.stack(means).sum().backward()
        stacked.assign_gradients()
        return results

    def scored_batches(self, dataset, indices: list[int]):
        if self.chunked:
            return (dataset.__getitems__(indices[i : i + EVAL_SAMPLES]) for i in range(0, len(indices), EVAL_SAMPLES))
        lengths = [dataset.num_frames[i] for i in indices]
        sampler = BucketBatchSampler(lengths, EVAL_BATCH * max(lengths), EVAL_BATCH, shuffle=False)
        return ([dataset[indices[i]] for i in batch] for batch in sampler)

    def held_out_loss(self, model) -> float:
        return self.mean_loss(model, self.scored_batches(self.dev, list(range(len(self.dev)))))

    def train_slice_loss(self, model) -> float:
        """The loss on a fixed slice of the training samples (as many as the held-out set's):
        how far training optimised, apart from how it generalises."""
        return self.mean_loss(model, self.scored_batches(self.train_slice, self.slice_items))

    @torch.no_grad()
    def mean_loss(self, model, batches) -> float:
        model.eval()
        total, count = 0.0, 0
        for items in batches:
            batch = collate(items).to(self.device)
            log_probs, out_lens = model(batch.feats, batch.feat_lens)
            loss, n = self.objective.loss(log_probs, out_lens, batch)
            total, count = total + float(loss), count + n
        model.train()
        return total / max(count, 1)


def evenly_spaced(total: int, wanted: int) -> list[int]:
    """`wanted` positions of range(total), evenly spaced (all of them if fewer)."""
    step = max(1, total // max(wanted, 1))
    return list(range(0, total, step))[:wanted]


def epoch_plan(sampler: BucketBatchSampler, epoch: int, learners: int, passes: int = 1) -> list[list[list[int]]]:
    """The epoch's global batches, each dealt out by stride: one shard per learner; with several
    passes, each pass's batches in their own order."""
    return [
        [batch[r::learners] for r in range(learners)]
        for p in range(passes)
        for batch in sampler.global_batches(epoch * passes + p)
    ]


def simulation(settings: RunSettings, model, steps_per_epoch: int, gradients_fn=None) -> TimedSimulation:
    variant = None if settings.algorithm == BASELINE else parse_algorithm(settings.algorithm)
    factor = variant.lr_factor if variant else 1.0
    train_cfg = OmegaConf.merge(
        OmegaConf.create(settings.train),
        {"lr": settings.lr * factor, "warmup_steps": math.ceil(settings.warmup_epochs * steps_per_epoch)},
    )
    if settings.algorithm == BASELINE:
        return TimedSimulation(model, train_cfg, "ssgd", 1, seed=settings.seed)
    timing = settings.timing
    if timing["speeds"]:
        clock = Timing(tuple(timing["speeds"]), timing["jitter"], timing["exchange_time"], settings.seed)
    else:
        clock = Timing.drawn(
            settings.learners, timing["speed_spread"], timing["jitter"], timing["exchange_time"], settings.seed
        )
    return TimedSimulation(
        model,
        train_cfg,
        variant.base,
        settings.learners,
        settings.learners_per_node,
        variant.topology,
        variant.delay_by_one,
        clock,
        seed=settings.seed,
        gradients_fn=gradients_fn,
    )


@dataclass(frozen=True)
class NoiseSettings:
    """Where the baseline measures the gradient noise scale (noise_scale.py): batches of `small`
    and `big` items, `rounds` big ones; not part of a run's key (it changes no weight)."""

    small: int
    big: int
    rounds: int

    @classmethod
    def of(cls, scfg) -> NoiseSettings | None:
        """sweep.noise_batches, or the base batch and the largest batch of the sweep that is a
        multiple of it (None: no such batch, or noise_rounds 0)."""
        if not scfg.noise_rounds:
            return None
        if scfg.noise_batches:
            small, big = (int(b) for b in scfg.noise_batches)
            return cls(small, big, int(scfg.noise_rounds))
        small = int(scfg.base_batch)
        big = max((b for b in sweep_batches(scfg) if b > small and b % small == 0), default=None)
        return cls(small, big, int(scfg.noise_rounds)) if big else None


def noise_scale(data: SweepData, model, noise: NoiseSettings, seed: int) -> dict:
    found = measure_noise_scale(model, data.loss, data.num_items, noise.small, noise.big, noise.rounds, seed)
    return found.to_json()


def train_run(
    data: SweepData,
    settings: RunSettings,
    progress=None,
    learner_losses: bool = False,
    noise: NoiseSettings | None = None,
) -> dict:
    """Train one run; returns its settings with the held-out loss per epoch (and the loss on a
    slice of the training samples). `progress(n)` is told of every n steps taken. With
    `learner_losses` every epoch also records each node's own held-out loss
    (asr/sweep/diagnose: the learners' average against the learners); with `noise` a baseline
    run records the gradient noise scale at its weights after every epoch."""
    start = time.monotonic()
    if noise is not None and settings.algorithm == BASELINE and noise.big > data.num_items:
        raise InputError(
            f"sweep.noise_batches: a big batch of {noise.big} needs that many training items; there are "
            f"{data.num_items}: give smaller noise_batches, or sweep.noise_rounds=0"
        )
    torch.manual_seed(settings.init_seed)
    model = build_model(OmegaConf.create(settings.model), data.train.feat_dim, data.objective.num_outputs)
    model.to(data.device)
    untrained = data.held_out_loss(model)
    sampler = data.sampler(settings.per_learner_batch, settings.learners, settings.seed)
    steps_per_epoch = len(sampler.global_batches(0)) * settings.passes
    sim = simulation(settings, model, steps_per_epoch, data.gradients_fn(model))
    observer = (lambda node, step: progress(1)) if progress is not None else None
    epochs, diverged = [], False
    for epoch in range(settings.epochs):
        data.set_epoch(epoch)
        run = sim.train_epoch(epoch_plan(sampler, epoch, settings.learners, settings.passes), data.loss, observer)
        lr = sim.lr
        average, spread = sim.end_epoch()
        averaged = averaged_model(sim.models[0], average)
        held_out = data.held_out_loss(averaged)
        record = {}
        if learner_losses:
            record["learner_held_out"] = [finite_or_none(data.held_out_loss(m)) for m in sim.models]
        if noise is not None and settings.algorithm == BASELINE and math.isfinite(held_out):
            record["noise_scale"] = noise_scale(data, averaged, noise, settings.seed * 1000 + epoch)
        epochs.append(
            record
            | {
                "epoch": epoch + 1,
                "train_loss": run.loss / max(run.count, 1),
                "train_slice_loss": finite_or_none(data.train_slice_loss(averaged)),
                "held_out_loss": finite_or_none(held_out),
                "spread": finite_or_none(spread),
                "lr": lr,
                "steps": run.steps,
                "time": round(float(run.time), 3),
                "waited": round(float(run.waited), 3),
            }
        )
        if not math.isfinite(held_out) or held_out > untrained:
            diverged = True
            break
    return settings.key() | {
        "per_learner_batch": settings.per_learner_batch,
        "passes": settings.passes,
        "device": str(data.device),  # not part of the key: a device changes round-off only
        "steps_per_epoch": steps_per_epoch,
        "untrained_loss": untrained,
        "held_out_loss": None if diverged else epochs[-1]["held_out_loss"],
        "diverged": diverged,
        "epochs_log": epochs,
        "skipped_updates": sim.skipped,
        "train_utterances": data.num_utts,
        "held_out_utterances": data.dev.num_utts if data.chunked else len(data.dev),
        "train_samples": data.num_items if data.chunked else None,
        "held_out_samples": len(data.dev) if data.chunked else None,
        "seconds": round(time.monotonic() - start, 1),
    }


def finite_or_none(value: float) -> float | None:
    """JSON has no NaN or infinity."""
    return float(value) if math.isfinite(value) else None
