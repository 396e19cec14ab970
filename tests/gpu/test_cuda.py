"""The CUDA path through the real entry points, each compared with the same run on the CPU.

These run only where torch sees a GPU (no machine CI runs on has one); everywhere else the
module skips with that reason. `ASR_TEST_GPU=cpu` runs the same tests with the CPU standing in
for the GPU, which checks the tests themselves (every comparison then holds exactly or within
round-off) without a GPU. On one GPU the multi-learner runs put every learner on it and use gloo
(NCCL refuses two ranks on one device): DDP all-reduces CUDA tensors over gloo, and the ADPSGD
exchange runs its side stream, pinned host buffers and events as on a cluster; the NCCL run is a
single learner.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import kaldiio
import numpy as np
import pytest
import torch
from tests.distributed.conftest import run_torchrun, train_overrides
from tests.fixtures.hybrid_corpus import hybrid_overrides, write_hybrid_corpus
from tests.fixtures.toy_corpus import make_toy_experiment, toy_config

from asr.config import load_config
from asr.decode.stage import decode_greedy
from asr.models.checkpoint import load_checkpoint
from asr.train import loop
from asr.train.trainlog import TrainLog

GPU = os.environ.get("ASR_TEST_GPU", "cuda")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        GPU.startswith("cuda") and not torch.cuda.is_available(), reason="no CUDA device (run on a GPU machine)"
    ),
]

EXACT = ["model.dropout=0.0", "train.precision=fp32"]  # dropout draws differ between devices
DEVICES = {"cpu": "cpu", "gpu": GPU}  # each run's name -> the device it trains on


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("toy")
    make_toy_experiment(root)
    return root


def copy_of(corpus: Path, tmp_path: Path, name: str) -> Path:
    shutil.copytree(corpus, tmp_path / name)
    return tmp_path / name


def train(root: Path, device: str, *extra: str) -> dict:
    loop.train(toy_config(root, [f"device={device}", *extra]))
    return load_checkpoint(root / "exp" / "checkpoints" / "last.pt")


def dev_losses(exp: Path) -> list[float]:
    return [r.dev_loss for r in TrainLog(exp).rows if r.dev_loss == r.dev_loss]


def assert_weights_close(got: dict, expected: dict, atol: float) -> None:
    largest = max(float((got[name].cpu() - tensor.cpu()).abs().max()) for name, tensor in expected.items())
    print(f"largest weight difference {largest:.3g} (allowed {atol:.3g})")
    assert largest <= atol


@pytest.fixture(scope="module")
def cpu_and_gpu_runs(corpus, tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("runs")
    roots = {}
    for name, device in DEVICES.items():
        root = copy_of(corpus, base, name)
        train(root, device, *EXACT, "train.epochs=3")
        roots[name] = root
    return roots


def test_fp32_training_on_the_gpu_follows_the_cpu(cpu_and_gpu_runs):
    cpu, gpu = (load_checkpoint(cpu_and_gpu_runs[d] / "exp" / "checkpoints" / "last.pt") for d in DEVICES)
    assert gpu["step"] == cpu["step"]
    # cuDNN's LSTM and CTC sum in another order: round-off only, over ~15 updates (with TF32,
    # which train.precision=fp32 turns off, 0.008).
    assert_weights_close(gpu["model"], cpu["model"], atol=1e-4)
    expected, got = (dev_losses(cpu_and_gpu_runs[d] / "exp") for d in DEVICES)
    assert got == pytest.approx(expected, rel=1e-3)
    assert got[-1] < got[0]


def test_greedy_decoding_on_the_gpu_gives_the_cpu_hypotheses(cpu_and_gpu_runs):
    root = cpu_and_gpu_runs["cpu"]
    hyps = {}
    for name, device in DEVICES.items():
        out = root / f"exp_{name}"
        shutil.copytree(root / "exp", out, dirs_exist_ok=True)
        cfg = toy_config(root, [f"device={device}", f"exp_dir={out}", "decode.sets=[dev,eval]"])
        hyps[name] = [(d / "hyp.txt").read_text() for d in decode_greedy(cfg)]
    assert hyps["gpu"] == hyps["cpu"]
    assert all(text.strip() for text in hyps["gpu"])


@pytest.mark.parametrize("precision", ["auto", "bf16", "fp16"])
def test_reduced_precision_on_the_gpu_learns_as_fp32_does(cpu_and_gpu_runs, corpus, tmp_path, caplog, precision):
    if not GPU.startswith("cuda"):
        pytest.skip("autocast in bf16/fp16 with a GradScaler is the GPU's")
    caplog.set_level("INFO")
    root = copy_of(corpus, tmp_path, precision)
    train(root, GPU, "model.dropout=0.0", "train.epochs=3", f"train.precision={precision}")
    chosen = "bf16" if precision == "auto" and torch.cuda.is_bf16_supported() else precision
    assert re.search(rf"training on cuda(:\d)? in {chosen}", caplog.text), caplog.text[-2000:]
    fp32 = dev_losses(cpu_and_gpu_runs["gpu"] / "exp")
    got = dev_losses(root / "exp")
    assert got[-1] < got[0]
    assert abs(got[-1] - fp32[-1]) < 0.1 * fp32[0]


class Crash(Exception):
    pass


def test_a_gpu_run_resumes_from_its_checkpoint_as_if_never_stopped(cpu_and_gpu_runs, corpus, tmp_path, monkeypatch):
    expected = load_checkpoint(cpu_and_gpu_runs["gpu"] / "exp" / "checkpoints" / "last.pt")
    root = copy_of(corpus, tmp_path, "resumed")
    original, count = loop.Trainer.train_batch, {"n": 0}

    def train_batch(self, batch):
        if count["n"] == expected["step"] // 2 + 1:
            raise Crash
        count["n"] += 1
        original(self, batch)

    with monkeypatch.context() as m:
        m.setattr(loop.Trainer, "train_batch", train_batch)
        with pytest.raises(Crash):
            train(root, GPU, *EXACT, "train.epochs=3")
    got = train(root, GPU, *EXACT, "train.epochs=3")
    assert got["step"] == expected["step"]
    # Exact on the CPU; on the GPU CTC's backward sums with atomics, so round-off differs.
    assert_weights_close(got["model"], expected["model"], atol=1e-4)


def synchronising_calls(step) -> list[str]:
    """Where `step()` synchronised with the GPU, by torch's CUDA sync debug mode: for each sync the
    innermost line of asr/ that led to it and the innermost Python line (torch's own, often)."""
    import traceback
    import warnings

    calls = []

    def record(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" not in str(message) or "prototype feature" in str(message):
            return
        frames = traceback.extract_stack()[:-1]
        ours = [f for f in frames if "/asr/" in f.filename]
        where = f"{ours[-1].filename.split('/asr/')[-1]}:{ours[-1].lineno}" if ours else "?"
        calls.append(f"asr/{where} via {Path(filename).name}:{lineno}")

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return calls


def bare_ctc_loss_syncs() -> int:
    """The syncs of torch's own CUDA CTC loss, forward and backward, on lengths kept on the GPU (it
    reads them to the host and copies offsets back), as ctc_utterance_losses calls it."""
    from asr.train.objectives import ctc_utterance_losses
    from asr.train.data import Batch

    lens, target_lens = torch.tensor([20, 17], device=GPU), torch.tensor([5, 3], device=GPU)
    log_probs = torch.randn(2, 20, 10, device=GPU).log_softmax(-1).requires_grad_()
    batch = Batch(["a", "b"], log_probs, lens, torch.randint(1, 10, (8,), device=GPU), target_lens)
    ctc_utterance_losses(log_probs, lens, batch).sum().backward()  # warm: the first call sets up
    return len(synchronising_calls(lambda: ctc_utterance_losses(log_probs, lens, batch).sum().backward()))


@pytest.mark.parametrize("objective", ["ctc", "frame_ce"])
def test_a_training_step_synchronises_with_the_gpu_once(corpus, tmp_path, monkeypatch, objective):
    """Issue 52: torch's CUDA sync debug mode warns at every synchronising call; a step makes one
    (its counts' read: tokens, non-finite losses, the stop request), the first step aside (the
    optimizer's state and cuDNN's plans are made there). The hybrid model's frame cross-entropy
    on 21-frame samples, and the toy CTC model, where torch's CTC loss adds its own syncs."""
    if not GPU.startswith("cuda"):
        pytest.skip("CUDA's sync debug mode")
    original, per_step = loop.Trainer.train_batch, []
    monkeypatch.setattr(
        loop.Trainer,
        "train_batch",
        lambda self, batch: per_step.append(synchronising_calls(lambda: original(self, batch))),
    )
    settings = [f"device={GPU}", "train.epochs=1", "train.log_every_steps=1000", "train.grad_clip=5"]
    if objective == "ctc":
        torchs = bare_ctc_loss_syncs()
        train(copy_of(corpus, tmp_path, "syncs"), GPU, *settings[1:])
    else:
        torchs = 0
        root = write_hybrid_corpus(tmp_path / "hybrid")
        frames = ["train.chunk_frames=21", "model.subsample=1", "train.batch_samples=16"]
        loop.train(load_config([*hybrid_overrides(root, frames), *settings]))
    counts = [len(syncs) for syncs in per_step[1:]]
    print(f"{objective}: {len(per_step)} steps; syncs after the first: {counts}; torch's CTC loss alone: {torchs}")
    assert len(per_step) > 2 and max(counts) <= 1 + torchs, per_step[1:3]


def torchrun_train(root: Path, nproc: int, name: str, *extra: str) -> str:
    args = train_overrides(root, f"device={GPU}", f"exp_dir={root / name}", "distributed.timeout_s=120", *extra)
    done = run_torchrun(nproc, ["asr.train", *args], timeout=600)
    assert done.returncode == 0, done.stderr[-6000:]
    return done.stderr + done.stdout


@pytest.fixture(scope="module")
def distributed_runs(corpus) -> dict[str, str]:
    gloo = "distributed.backend=gloo"
    return {
        "ssgd": torchrun_train(corpus, 2, "ssgd", "distributed=ssgd", gloo, *EXACT, "train.max_utts=4"),
        "single": torchrun_train(corpus, 1, "single", "distributed=ssgd", gloo, *EXACT, "train.max_utts=8"),
        "adpsgd": torchrun_train(corpus, 2, "adpsgd", "distributed=adpsgd", gloo, "train.max_utts=4"),
        "hadpsgd": torchrun_train(
            corpus, 4, "hadpsgd", "distributed=hadpsgd", "distributed.learners_per_node=2", gloo, "train.max_utts=2"
        ),
    }


def test_ssgd_of_two_gpu_learners_equals_one_learner_with_their_union_batch(corpus, distributed_runs):
    two, one = (load_checkpoint(corpus / name / "checkpoints" / "last.pt") for name in ("ssgd", "single"))
    assert two["step"] == one["step"]
    assert_weights_close(two["model"], one["model"], atol=1e-4)


@pytest.mark.parametrize("name", ["adpsgd", "hadpsgd"])
def test_decentralized_learners_exchange_through_the_side_stream_and_learn(corpus, distributed_runs, name):
    text = distributed_runs[name]
    exchanges = [int(n) for n in re.findall(r"learner \d+: (\d+) ADPSGD weight exchanges", text)]
    assert exchanges and max(exchanges) > 0, text[-3000:]
    state = load_checkpoint(corpus / name / "checkpoints" / "last.pt")
    assert all(torch.isfinite(t).all() for t in state["model"].values())
    losses = dev_losses(corpus / name)
    assert losses[-1] < losses[0]


def test_frame_level_training_on_21_frame_samples_on_the_gpu_follows_the_cpu(tmp_path):
    root = write_hybrid_corpus(tmp_path / "hybrid")
    acc = {}
    for name, device in DEVICES.items():
        cfg = load_config(
            [
                *hybrid_overrides(
                    root,
                    ["train.chunk_frames=21", "model.subsample=1", "train.batch_samples=16", "train.precision=fp32"],
                ),
                f"device={device}",
                f"exp_dir={root / name}",
            ]  # fmt: skip
        )
        loop.train(cfg)
        acc[name] = load_checkpoint(root / name / "checkpoints" / "last.pt")
    assert acc["gpu"]["progress"]["dev_loss"] == pytest.approx(acc["cpu"]["progress"]["dev_loss"], rel=1e-3)
    assert_weights_close(acc["gpu"]["model"], acc["cpu"]["model"], atol=1e-3)


def test_frame_level_training_in_bf16_on_the_gpu_learns_as_fp32_does(tmp_path):
    """The paper's path in the precision `auto` picks on a GPU: frame CE on 21-frame samples
    under bf16 autocast, its held-out loss after 4 epochs beside the same run in fp32."""
    if not GPU.startswith("cuda"):
        pytest.skip("autocast in bf16 is the GPU's")
    root = write_hybrid_corpus(tmp_path / "hybrid")
    losses = {}
    for precision in ("fp32", "bf16"):
        frames = [
            "train.chunk_frames=21",
            "model.subsample=1",
            "train.batch_samples=16",
            f"train.precision={precision}",
        ]
        loop.train(load_config([*hybrid_overrides(root, frames), f"device={GPU}", f"exp_dir={root / precision}"]))
        losses[precision] = dev_losses(root / precision)
    print(f"held-out losses: fp32 {losses['fp32']}, bf16 {losses['bf16']}")
    assert losses["bf16"][-1] < losses["bf16"][0]
    assert abs(losses["bf16"][-1] - losses["fp32"][-1]) < 0.1 * losses["fp32"][0]


# The sweep's runs on the hybrid toy corpus: 4 learners (2 a node), batches of 8 and 16 samples
TOY_SWEEP = ["sweep=ctc", "sweep.learners=4", "sweep.learners_per_node=2", "sweep.base_batch=8"]
TOY_SWEEP += ["sweep.global_batches=[8,16]", "sweep.critical_batch=16", "sweep.epochs=2", "sweep.max_train_utts=0"]


@pytest.mark.parametrize("algorithm", ["ssgd", "adpsgd", "hadpsgd"])
def test_a_sweep_run_on_the_gpu_follows_the_cpu(tmp_path, algorithm):
    """The sweep's simulated learners (asr.sweep device=...): the same run's held-out loss after
    every epoch on both devices, with an updates budget (two passes an epoch at batch 16)."""
    from asr.sweep.run import SweepData, run_settings, train_run, with_train_config

    root = write_hybrid_corpus(tmp_path / "hybrid")
    sweep = [*TOY_SWEEP, "sweep.budget=updates"]
    losses = {}
    for name, device in DEVICES.items():
        overrides = ["train.chunk_frames=21", "model.subsample=1", *sweep, f"device={device}"]
        cfg = with_train_config(load_config(hybrid_overrides(root, overrides)))
        run = train_run(SweepData(cfg), run_settings(cfg, algorithm, 16, 0.1, seed=1))
        assert run["passes"] == 2 and not run["diverged"]
        losses[name] = [e["held_out_loss"] for e in run["epochs_log"]]
    print(f"held-out losses: cpu {losses['cpu']}, gpu {losses['gpu']}")
    assert losses["gpu"] == pytest.approx(losses["cpu"], rel=1e-4)


@pytest.mark.parametrize("algorithm", ["adpsgd", "hadpsgd"])
def test_the_sweeps_batched_nodes_on_the_gpu_train_what_each_node_alone_trains_on_the_cpu(tmp_path, algorithm):
    """sweep.batched_nodes=true (asr/sweep/batched.py: one stacked model for every node's step)
    on the GPU against the per-node loop on the CPU: the held-out loss after every epoch."""
    from asr.sweep.run import SweepData, run_settings, train_run, with_train_config

    root = write_hybrid_corpus(tmp_path / "hybrid")
    sweep = [*TOY_SWEEP, "sweep.exchange_time=0.3"]
    losses = {}
    for name, device in DEVICES.items():
        batched = f"sweep.batched_nodes={str(name == 'gpu').lower()}"
        overrides = ["train.chunk_frames=21", "model.subsample=1", *sweep, batched, f"device={device}"]
        cfg = with_train_config(load_config(hybrid_overrides(root, overrides)))
        run = train_run(SweepData(cfg), run_settings(cfg, algorithm, 16, 0.1, seed=1))
        assert not run["diverged"]
        losses[name] = [e["held_out_loss"] for e in run["epochs_log"]]
    print(f"held-out losses: cpu, each node alone {losses['cpu']}; gpu, batched {losses['gpu']}")
    assert losses["gpu"] == pytest.approx(losses["cpu"], rel=1e-4)


def test_ivector_features_on_the_gpu_are_the_cpu_ones(tmp_path):
    """The i-vector recipe end to end (UBM, extractor EM, online extraction) with its statistics
    on the GPU, over the feature tests' SPHERE corpus."""
    from asr.features.recipes import make_features
    from tests.features.conftest import SETS
    from tests.features.test_features_extract import make_data_dir
    from tests.features.test_ivector_recipe import SMALL_IVECTOR

    for name in SETS:
        make_data_dir(tmp_path, name)
    feats = {}
    for name, device in DEVICES.items():
        make_features(
            load_config(
                [
                    "features=ivector100",
                    f"data.data_dir={tmp_path / 'data'}",
                    "data.train_set=train",
                    "data.dev_set=dev",
                    "data.eval_set=eval",
                    f"features.feats_dir={tmp_path / name / 'feats'}",
                    f"exp_dir={tmp_path / name / 'exp'}",
                    f"features.device={device}",
                    *SMALL_IVECTOR,
                ]
            )
        )
        feats[name] = dict(
            kaldiio.load_scp(str(tmp_path / name / "feats" / "ivector100" / "train" / "ivector_online.scp"))
        )
    assert feats["gpu"].keys() == feats["cpu"].keys() and feats["cpu"]
    largest = max(float(np.abs(feats["gpu"][u] - m).max() / np.abs(m).max()) for u, m in feats["cpu"].items())
    print(f"i-vectors: largest difference {largest:.3g} of the largest value")
    assert largest < 2e-3


def clustered_frames(frames: int, dim: int, seed: int) -> torch.Tensor:
    """Frames from 8 well-separated Gaussians: a GMM fit whose answer round-off cannot move."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 4, (8, dim))
    return torch.from_numpy(centres[rng.integers(0, 8, frames)] + rng.normal(0, 1, (frames, dim)))


def test_gmm_and_fmllr_statistics_on_the_gpu_are_the_cpu_ones():
    """The GMM training and the fMLLR estimation the fMLLR recipes run with features.device=cuda."""
    from asr.features.fmllr.transform import estimate_fmllr
    from asr.features.gmm import train_gmm

    x = clustered_frames(4000, 13, seed=1)
    gmms = {name: train_gmm(x, 8, device=device)[0] for name, device in DEVICES.items()}
    for field in ("weights", "means", "variances"):
        got, expected = (getattr(gmms[n], field).cpu() for n in DEVICES)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5, msg=field)
    speaker = clustered_frames(600, 13, seed=2) * 1.3 + 0.5  # a speaker the transform must undo
    results = {name: estimate_fmllr(gmms[name], speaker.to(DEVICES[name])) for name in DEVICES}
    assert results["gpu"].updated and results["cpu"].updated
    np.testing.assert_allclose(results["gpu"].transform, results["cpu"].transform, rtol=0, atol=1e-3)
    assert results["gpu"].loglike_after == pytest.approx(results["cpu"].loglike_after, rel=1e-4)


def test_ddp_and_the_token_counts_run_over_nccl_on_the_gpu():
    """One learner's NCCL group (NCCL refuses two ranks on one GPU): DDP's bucketed all-reduce and
    SSGD's count reduction run as NCCL kernels on the learner's device, and the gradient is the
    plain one."""
    if not GPU.startswith("cuda"):
        pytest.skip("NCCL is the GPU's backend")
    import torch.distributed as dist

    from asr.distributed.ssgd import ddp_wrap, group_sums, weighted_mean_factor

    device = torch.device("cuda", 0)
    dist.init_process_group("cpu:gloo,cuda:nccl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        plain = torch.nn.LSTM(8, 16, bidirectional=True, batch_first=True).to(device)
        wrapped = ddp_wrap(torch.nn.LSTM(8, 16, bidirectional=True, batch_first=True).to(device), device, None, 1.0)
        wrapped.module.load_state_dict(plain.state_dict())
        x = torch.randn(4, 30, 8, device=device)
        mine, (total, unusable) = group_sums(torch.tensor([120.0, 0.0], device=device), None, device)
        factor = weighted_mean_factor(mine[0], total, unusable, 1)
        assert factor == 1.0
        (plain(x)[0].square().mean()).backward()
        (wrapped(x)[0].square().mean() * factor).backward()
        for a, b in zip(plain.parameters(), wrapped.module.parameters()):
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-7)
    finally:
        dist.destroy_process_group()
