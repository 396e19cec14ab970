"""The gradient noise scale's estimator (B_simple) on a quadratic whose noise scale is known:
per-sample loss |w - x_i|^2 / 2, so the per-sample gradient is w - x_i, G = w - mean(x) and
tr(Sigma) the samples' total variance."""

import pytest
import torch

from asr.sweep.noise_scale import estimate, measure
from asr.utils.errors import InputError

DIM, SAMPLES, TRUE_SCALE = 40, 16384, 96.0


class Point(torch.nn.Module):
    def __init__(self, start: torch.Tensor):
        super().__init__()
        self.w = torch.nn.Parameter(start.clone())


def quadratic(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, DIM, generator=generator, dtype=torch.float64)
    # |G|^2 = tr(Sigma) / TRUE_SCALE, the samples' own covariance and mean
    trace = float(x.var(dim=0, unbiased=False).sum())
    direction = torch.randn(DIM, generator=generator, dtype=torch.float64)
    w = x.mean(dim=0) + direction / direction.norm() * (trace / TRUE_SCALE) ** 0.5

    def batch_loss(model, shards):
        items = x[[i for shard in shards for i in shard]]
        return 0.5 * (model.w - items).pow(2).sum(), len(items)

    return Point(w), batch_loss


@pytest.mark.parametrize("small, big", [(8, 256), (32, 128)])
def test_the_estimate_recovers_a_known_noise_scale_within_20_percent(small, big):
    model, batch_loss = quadratic()
    found = measure(model, batch_loss, SAMPLES, small, big, batches=SAMPLES // big, seed=3)
    assert found.simple == pytest.approx(TRUE_SCALE, rel=0.2)
    assert found.batches == SAMPLES // big


def test_measuring_leaves_the_gradients_and_random_state_as_they_were():
    model, batch_loss = quadratic()
    model.w.grad = torch.ones(DIM, dtype=torch.float64)
    state = torch.get_rng_state()
    measure(model, batch_loss, SAMPLES, 16, 64, batches=4, seed=0)
    assert torch.equal(model.w.grad, torch.ones(DIM, dtype=torch.float64))
    assert torch.equal(torch.get_rng_state(), state)


def test_the_estimator_from_exact_expectations():
    # E|G_b|^2 = |G|^2 + tr / b: from exact values the estimator returns |G|^2 and tr exactly
    g2, trace = 0.5, 64.0
    found = estimate([g2 + trace / 4], [g2 + trace / 64], 4, 64)
    assert found.gradient_sq == pytest.approx(g2) and found.trace == pytest.approx(trace)
    assert found.simple == pytest.approx(trace / g2)


@pytest.mark.parametrize("small, big", [(1.0, 0.05), (1.0, 1.2)])
def test_an_estimate_below_zero_gives_no_noise_scale(small, big):
    # |G|^2 < 0 (big batches' norms below b/B of the small ones'), tr(Sigma) < 0 (above them)
    assert estimate([small], [big], 4, 64).simple is None


@pytest.mark.parametrize("small, big", [(64, 64), (48, 64), (0, 64)])
def test_batches_that_do_not_nest_are_refused(small, big):
    with pytest.raises(InputError, match="sweep.noise_batches"):
        estimate([1.0], [0.5], small, big)
