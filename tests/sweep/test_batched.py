"""The batched nodes (asr/sweep/batched.py) against each model alone: the same log-probs and,
per model, the gradient of its own mean loss, for the BLSTM shapes the sweep builds."""

import pytest
import torch

from asr.models.blstm import build_model
from asr.models.config import ModelConfig
from asr.sweep.batched import StackedModels, batchable

torch.set_num_threads(1)
NODES, BATCH, FRAMES, DIM, OUTPUTS = 5, 3, 12, 6, 7

SHAPES = {
    "the sweep's 1x64": dict(num_layers=1, hidden_size=16, stack_frames=1, subsample=1),
    "stacked and subsampled, 2 layers": dict(num_layers=2, hidden_size=8, stack_frames=3, subsample=3),
    "with a bottleneck": dict(num_layers=2, hidden_size=8, bottleneck=5, stack_frames=2, subsample=2),
    "one direction": dict(num_layers=2, hidden_size=8, bidirectional=False, stack_frames=1, subsample=1),
}


def models(shape: dict) -> list:
    cfg = ModelConfig(dropout=0.0, head="frame_ce", **shape)
    out = []
    for seed in range(NODES):
        torch.manual_seed(seed)  # each node its own weights, as after steps apart
        out.append(build_model(cfg, DIM, OUTPUTS))
    return out


def node_loss(log_probs, targets):
    """A summed per-frame cross-entropy and its count (what the objectives return)."""
    return torch.nn.functional.nll_loss(log_probs.flatten(0, 1), targets.flatten(), reduction="sum"), targets.numel()


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_one_batched_step_gives_every_node_its_own_log_probs_and_gradient(shape):
    generator = torch.Generator().manual_seed(7)
    feats = torch.randn(NODES, BATCH, FRAMES, DIM, generator=generator)
    lens = torch.full((BATCH,), FRAMES)
    each = models(shape)
    frames_out = -(-FRAMES // shape["subsample"])
    targets = torch.randint(0, OUTPUTS, (NODES, BATCH, frames_out), generator=generator)

    expected_grads, expected_log_probs = [], []
    for n, model in enumerate(each):
        log_probs, _ = model(feats[n], lens)
        loss, count = node_loss(log_probs, targets[n])
        (loss / count).backward()
        expected_log_probs.append(log_probs.detach())
        expected_grads.append({name: p.grad.clone() for name, p in model.named_parameters()})
        model.zero_grad(set_to_none=True)

    stacked = StackedModels(each)
    log_probs, out_lens = stacked.forward(feats, lens)
    assert out_lens.tolist() == [frames_out] * BATCH
    losses = [node_loss(log_probs[n], targets[n]) for n in range(NODES)]
    torch.stack([loss / count for loss, count in losses]).sum().backward()
    stacked.assign_gradients()
    for n, model in enumerate(each):
        torch.testing.assert_close(log_probs[n].detach(), expected_log_probs[n], rtol=1e-5, atol=1e-5)
        for name, p in model.named_parameters():
            torch.testing.assert_close(p.grad, expected_grads[n][name], rtol=1e-4, atol=1e-6, msg=f"node {n} {name}")


def test_the_stacked_weights_leave_the_models_untouched_until_the_gradients_are_assigned():
    each = models(SHAPES["the sweep's 1x64"])
    before = [[p.detach().clone() for p in m.parameters()] for m in each]
    stacked = StackedModels(each)
    log_probs, _ = stacked.forward(torch.randn(NODES, BATCH, FRAMES, DIM), torch.full((BATCH,), FRAMES))
    log_probs.sum().backward()
    assert all(p.grad is None for m in each for p in m.parameters())
    assert all(torch.equal(p, b) for m, bs in zip(each, before) for p, b in zip(m.parameters(), bs))


def test_unequal_lengths_and_dropout_are_not_batched():
    each = models(SHAPES["the sweep's 1x64"])
    with pytest.raises(ValueError, match="one length"):
        StackedModels(each).forward(torch.randn(NODES, BATCH, FRAMES, DIM), torch.tensor([FRAMES, FRAMES - 1, FRAMES]))
    assert batchable(each[0]) is None
    with_dropout = build_model(ModelConfig(dropout=0.1, head="frame_ce"), DIM, OUTPUTS)
    assert "model.dropout=0.1" in batchable(with_dropout)
