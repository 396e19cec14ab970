"""The nodes of a simulated run as one batched model: their BLSTMs' weights stacked, one
forward and one backward for all of them.

The sweep's nodes each train their own copy of one small model on their own batch; looping
over them runs a dozen tiny LSTM calls a step, each mostly call overhead. Here every weight
gets a leading node axis and the LSTM recurrence is written out with batched matrix products
(torch's fused LSTM kernels have no node axis), so N nodes cost about what one node with an
N-times larger batch costs. The sum over nodes of each node's mean loss has, in each node's
slice of the stacked weights, exactly that node's gradient; `assign_gradients` hands the
slices back. It needs equal-length inputs (the paper's fixed-length samples:
train.chunk_frames) and no dropout (each node's mask would differ from the loop's);
tests/sweep/test_batched.py checks it against the per-node loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from asr.models.blstm import AcousticModel


def batchable(model: nn.Module) -> str | None:
    """Why `model` cannot be batched (None: it can)."""
    if not isinstance(model, AcousticModel):
        return f"{type(model).__name__} is not the BLSTM acoustic model"
    if model.encoder.dropout.p > 0:
        return f"model.dropout={model.encoder.dropout.p:g}: each node's dropout mask would differ from the loop's"
    return None


class StackedModels:
    """N AcousticModels of one architecture with their weights stacked along a first axis, as
    leaves of their own (the models are not touched until `assign_gradients`)."""

    def __init__(self, models: Sequence[AcousticModel]):
        self.models = list(models)
        self.names = [name for name, _ in models[0].named_parameters()]
        per_model = [dict(m.named_parameters()) for m in models]
        self.weights = {
            name: torch.stack([p[name].detach() for p in per_model]).requires_grad_(True) for name in self.names
        }
        first = models[0]
        self.stacker = first.encoder.stacker
        self.num_layers = len(first.encoder.layers)
        self.bidirectional = first.encoder.layers[0].backward_lstm is not None
        self.has_bottleneck = first.encoder.bottleneck is not None

    def forward(self, feats: Tensor, feat_lens: Tensor) -> tuple[Tensor, Tensor]:
        """feats (N, B, T, D), every utterance T frames -> log-probs (N, B, T', V), out_lens (B,)."""
        nodes, batch, frames, dim = feats.shape
        if int(feat_lens.min()) != frames:
            raise ValueError("batched nodes need inputs of one length (train.chunk_frames)")
        hidden, out_lens = self.stacker(feats.reshape(nodes * batch, frames, dim), feat_lens.repeat(nodes))
        hidden = hidden.reshape(nodes, batch, hidden.shape[1], hidden.shape[2])
        for i in range(self.num_layers):
            prefix = f"encoder.layers.{i}"
            ahead = self.lstm(hidden, f"{prefix}.forward_lstm")
            if self.bidirectional:
                behind = self.lstm(hidden.flip(2), f"{prefix}.backward_lstm").flip(2)
                ahead = torch.cat([ahead, behind], dim=-1)
            hidden = ahead
        if self.has_bottleneck:
            hidden = self.linear(hidden, "encoder.bottleneck")
        logits = self.linear(hidden, "head.linear")
        return torch.log_softmax(logits.float(), dim=-1), out_lens[:batch]

    def linear(self, x: Tensor, name: str) -> Tensor:
        return affine(x, self.weights[f"{name}.weight"], self.weights[f"{name}.bias"])

    def lstm(self, x: Tensor, name: str) -> Tensor:
        """One direction of one layer, nn.LSTM's equations (gates i, f, g, o) per node."""
        w_ih, w_hh = self.weights[f"{name}.weight_ih_l0"], self.weights[f"{name}.weight_hh_l0"]
        bias = self.weights[f"{name}.bias_ih_l0"] + self.weights[f"{name}.bias_hh_l0"]
        nodes, batch, steps, _ = x.shape
        size = w_hh.shape[2]
        # one tensor per step by unbind: indexing each step would make its backward a full-size add
        inputs = affine(x, w_ih, bias).unbind(2)
        h = x.new_zeros(nodes, batch, size)
        c = x.new_zeros(nodes, batch, size)
        recurrent = w_hh.transpose(1, 2)  # (N, H, 4H)
        outputs = []
        for t in range(steps):
            gates = torch.baddbmm(inputs[t], h, recurrent)
            i, f, g, o = gates.chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs, dim=2)

    def assign_gradients(self) -> None:
        """Each model's .grad from its slice of the stacked weights' gradients."""
        for name in self.names:
            grad = self.weights[name].grad
            for n, model in enumerate(self.models):
                param = model.get_parameter(name)
                param.grad = None if grad is None else grad[n].clone()


def affine(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """x (N, B, T, I) @ weight (N, O, I)^T + bias (N, O) per node, as one baddbmm over the
    (B, T) rows (the bias's gradient then sums contiguous rows)."""
    nodes, batch, steps, size = x.shape
    out = torch.baddbmm(bias[:, None, :], x.reshape(nodes, batch * steps, size), weight.transpose(1, 2))
    return out.view(nodes, batch, steps, -1)
