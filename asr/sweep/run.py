"""The batch-size sweep: each (algorithm, global batch) trained with simulated learners.

Every run starts from the same initial model (cfg.seed) and sees the same data order; the
global batch is `sweep.learners` x the per-learner batch, in utterances (max_frames is set
so that it never binds). The learning rate is train.lr scaled to the global batch
(sweep.lr_scaling relative to sweep.reference_batch), reached through train.warmup_steps of
warm-up and annealed by train.lr_decay per epoch. The held-out loss is the objective's loss
on the dev set with the average of the learners' weights after each epoch.

Results go to `<sweep.out_dir>/sweep.json` after every run, so an interrupted sweep
continues with the runs not done yet (a run is identified by its settings).
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf
from tqdm import tqdm

from asr.distributed.simulation import Simulation
from asr.models.blstm import build_model
from asr.train.data import BucketBatchSampler, collate
from asr.train.objectives import build_objective
from asr.utils.atomic import write_text
from asr.utils.errors import InputError

log = logging.getLogger(__name__)


def sweep_lr(cfg, global_batch: int) -> float:
    scfg = cfg.sweep
    ratio = global_batch / scfg.reference_batch
    factor = {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}.get(scfg.lr_scaling)
    if factor is None:
        raise InputError(f"sweep.lr_scaling={scfg.lr_scaling!r}: choose none, linear or sqrt")
    return float(cfg.train.lr) * factor


def run_settings(cfg, algorithm: str, global_batch: int) -> dict:
    """What identifies a run (a finished run with the same settings is not trained again)."""
    scfg = cfg.sweep
    return {
        "algorithm": algorithm,
        "global_batch": global_batch,
        "learners": scfg.learners,
        "learners_per_node": scfg.learners_per_node if algorithm == "hadpsgd" else (scfg.learners if algorithm == "ssgd" else 1),
        "per_learner_batch": global_batch // scfg.learners,
        "lr": sweep_lr(cfg, global_batch),
        "epochs": scfg.epochs,
        "max_train_utts": scfg.max_train_utts,
        "model": OmegaConf.to_container(cfg.model, resolve=True),
        "optimizer": cfg.train.optimizer,
        "seed": cfg.seed,
    }


def check(cfg) -> None:
    scfg = cfg.sweep
    for batch in scfg.global_batches:
        if batch % scfg.learners:
            raise InputError(f"sweep.global_batches: {batch} is not a multiple of sweep.learners={scfg.learners}")
    for algorithm in scfg.algorithms:
        if algorithm not in ("ssgd", "adpsgd", "hadpsgd"):
            raise InputError(f"sweep.algorithms: {algorithm!r}; choose from ssgd, adpsgd, hadpsgd")


class SweepData:
    """The training and held-out sets, loaded once for all runs."""

    def __init__(self, cfg):
        self.objective = build_objective(cfg)
        self.train = self.objective.dataset(cfg.data.train_set)
        self.dev = self.objective.dataset(cfg.data.dev_set)
        limit = cfg.sweep.max_train_utts
        self.train_index = list(range(len(self.train)))[: limit or None]
        self.lengths = [self.train.num_frames[i] for i in self.train_index]

    def loss(self, model, batch) -> tuple[torch.Tensor, int]:
        log_probs, out_lens = model(batch.feats, batch.feat_lens)
        return self.objective.loss(log_probs, out_lens, batch)

    @torch.no_grad()
    def held_out_loss(self, model, max_utts: int) -> float:
        model.eval()
        total, count = 0.0, 0
        sampler = BucketBatchSampler(self.dev.num_frames, max_utts * max(self.dev.num_frames), max_utts, shuffle=False)
        for indices in sampler:
            loss, n = self.loss(model, collate([self.dev[i] for i in indices]))
            total, count = total + float(loss), count + n
        model.train()
        return total / max(count, 1)


def train_run(cfg, data: SweepData, settings: dict) -> dict:
    learners, per_learner = settings["learners"], settings["per_learner_batch"]
    # Per-epoch annealing (lr_decay) whatever train.final_lr says: runs of different batch sizes
    # take different numbers of steps, and their peaks differ.
    train_cfg = OmegaConf.merge(cfg.train, {"lr": settings["lr"], "lr_scaling": "none", "final_lr": 0.0})
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, data.train.feat_dim, data.objective.num_outputs)
    consensus = cfg.sweep.consensus_every_steps or cfg.train.checkpoint_every_steps
    sim = Simulation(model, train_cfg, settings["algorithm"], learners, cfg.sweep.learners_per_node, consensus)
    sampler = BucketBatchSampler(data.lengths, per_learner * max(data.lengths), per_learner, seed=cfg.seed, num_replicas=learners)
    epochs, start = [], time.monotonic()
    for epoch in range(settings["epochs"]):
        batches = sampler.global_batches(epoch)
        loss_sum, count = 0.0, 0
        desc = f"{settings['algorithm']} batch {settings['global_batch']} epoch {epoch + 1}"
        for batch in tqdm(batches, desc=desc, disable=None, leave=False, dynamic_ncols=True):
            shards = [collate([data.train[data.train_index[i]] for i in batch[r::learners]]) for r in range(learners)]
            step_loss, step_count = sim.step(shards, data.loss)
            loss_sum, count = loss_sum + step_loss, count + step_count
        spread = sim.end_epoch()
        held_out = data.held_out_loss(sim.models[0], max(per_learner, 8))
        epochs.append({"epoch": epoch + 1, "train_loss": loss_sum / max(count, 1), "held_out_loss": held_out,
                       "spread": spread, "steps": sim.steps, "lr": sim.lr})
        log.info("%s: epoch %d, train loss %.4f, held-out loss %.4f, spread %.3g", desc.rsplit(" epoch", 1)[0], epoch + 1,
                 epochs[-1]["train_loss"], held_out, spread)
    return settings | {"epochs_log": epochs, "held_out_loss": epochs[-1]["held_out_loss"], "steps": sim.steps,
                       "skipped_updates": sim.skipped, "seconds": round(time.monotonic() - start, 1)}


def run_sweep(cfg) -> list[dict]:
    check(cfg)
    out_dir = Path(cfg.sweep.out_dir)
    results_path = out_dir / "sweep.json"
    done = json.loads(results_path.read_text()) if results_path.is_file() else []
    data = SweepData(cfg)
    log.info("sweep: %d training utterances, %d held out, %d learners", len(data.train_index), len(data.dev), cfg.sweep.learners)
    results = []
    for algorithm in cfg.sweep.algorithms:
        for global_batch in cfg.sweep.global_batches:
            settings = run_settings(cfg, algorithm, int(global_batch))
            previous = next((r for r in done if {k: r.get(k) for k in settings} == settings), None)
            if previous is not None:
                log.info("%s at global batch %d: done already (%s)", algorithm, global_batch, results_path)
                results.append(previous)
                continue
            results.append(train_run(cfg, data, settings))
            write_text(results_path, json.dumps(results + [r for r in done if r not in results], indent=1) + "\n")
    write_text(results_path, json.dumps(results, indent=1) + "\n")
    return results
