"""A small regression problem for the simulators' tests: a 6-8-2 MLP, batches of (x, y), and a
loss over the union of a node's shards."""

from types import SimpleNamespace

import torch

TARGET = torch.randn(6, 2, generator=torch.Generator().manual_seed(3))


def train_cfg(**kw):
    base = dict(
        optimizer="sgd",
        lr=0.05,
        momentum=0.9,
        nesterov=False,
        weight_decay=0.0,
        warmup_steps=3,
        lr_decay=1.0,
        grad_clip=1.0,
        max_frames=1,
        lr_scaling="none",
        lr_reference_frames=0,
    )
    return SimpleNamespace(**(base | kw))


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def batches(steps, size, seed=1):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        x = torch.randn(size, 6, generator=gen)
        out.append((x, x @ TARGET + 0.1 * torch.randn(size, 2, generator=gen)))
    return out


def loss_fn(m, shards):
    x = torch.cat([s[0] for s in shards])
    y = torch.cat([s[1] for s in shards])
    return (m(x) - y).pow(2).sum(), x.shape[0]


def split(batch, learners):
    x, y = batch
    return [(x[r::learners], y[r::learners]) for r in range(learners)]
