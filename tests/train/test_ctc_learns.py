"""The BLSTM-CTC model with the Updater learns a toy task: each token is a feature pattern."""

import time
from types import SimpleNamespace

import pytest
import torch

from asr.models.blstm import build_model
from asr.models.config import ModelConfig
from asr.optim.schedule import LrSchedule, build_optimizer
from asr.optim.updater import Updater
from asr.train.data import collate
from asr.train.loop import ctc_loss_sum
from asr.train.precision import autocast
from tests.fixtures.cpu import needs_cpu_bf16_lstm

torch.set_num_threads(1)

NUM_TOKENS, FEAT_DIM = 5, 8


def toy_batch(num_utts: int, seed: int):
    """Token k (1..5) is pattern k held for 4 frames; 2 silent frames around each token."""
    gen = torch.Generator().manual_seed(seed)
    patterns = torch.randn(NUM_TOKENS + 1, FEAT_DIM, generator=torch.Generator().manual_seed(0)) * 2
    items = []
    for i in range(num_utts):
        tokens = torch.randint(1, NUM_TOKENS + 1, (int(torch.randint(1, 5, (1,), generator=gen)),), generator=gen)
        frames = [torch.zeros(2, FEAT_DIM)]
        for t in tokens:
            frames += [patterns[t].repeat(4, 1), torch.zeros(2, FEAT_DIM)]
        feats = torch.cat(frames)
        items.append((f"u{i}", feats + 0.2 * torch.randn(feats.shape, generator=gen), tokens))
    return collate(items)


def per_token_loss(model, batch) -> float:
    model.eval()
    with torch.no_grad():
        log_probs, out_lens = model(batch.feats, batch.feat_lens)
        loss = ctc_loss_sum(log_probs, out_lens, batch).item() / batch.target_lens.sum().item()
    model.train()
    return loss


@pytest.mark.parametrize("precision", ["fp32", pytest.param("bf16", marks=needs_cpu_bf16_lstm())])
def test_ctc_loss_falls_hundredfold_in_60_updates(precision):
    torch.manual_seed(0)
    cfg = ModelConfig(num_layers=1, hidden_size=32, bidirectional=True, stack_frames=2, subsample=2, dropout=0.0)
    model = build_model(cfg, FEAT_DIM, NUM_TOKENS + 1)
    optimizer = build_optimizer(model.parameters(), SimpleNamespace(optimizer="adam", lr=0.02, weight_decay=0.0))
    updater = Updater(model, optimizer, LrSchedule(optimizer, 0.02, warmup_steps=5), grad_clip=5.0)
    train, held_out = toy_batch(32, seed=1), toy_batch(16, seed=2)
    initial = per_token_loss(model, held_out)
    start = time.monotonic()
    for _ in range(60):
        with autocast(torch.device("cpu"), precision):
            log_probs, out_lens = model(train.feats, train.feat_lens)
        assert log_probs.dtype == torch.float32  # the CTC loss always sees fp32
        updater.step(ctc_loss_sum(log_probs, out_lens, train) / train.target_lens.sum())
    elapsed = time.monotonic() - start
    final = per_token_loss(model, held_out)
    print(f"{precision}: held-out CTC loss per token {initial:.3f} -> {final:.3f} in {elapsed:.2f} s")
    assert final < initial / 100, (initial, final)
