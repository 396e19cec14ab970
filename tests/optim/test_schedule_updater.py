"""Learning-rate schedule, optimizers and the Updater interface."""

import math
from types import SimpleNamespace

import pytest
import torch

from asr.optim.schedule import LrSchedule, build_optimizer, final_lr_ratio, fused_kernels
from asr.optim.updater import Updater, create_optimizer_state, optimizer_moments

torch.set_num_threads(1)


def train_cfg(**kw):
    return SimpleNamespace(**({"optimizer": "adam", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.0} | kw))


def test_warmup_then_per_epoch_decay():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=123.0)
    s = LrSchedule(opt, base_lr=1.0, warmup_steps=4, decay=0.5)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(5):
        s.step()
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    s.end_epoch()
    s.end_epoch()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.25)
    fresh = LrSchedule(opt, base_lr=1.0, warmup_steps=4, decay=0.5)
    fresh.load_state_dict(s.state_dict())
    assert fresh.lr == s.lr == opt.param_groups[0]["lr"]
    assert LrSchedule(opt, 2.0, warmup_steps=0).lr == 2.0


def test_kaldi_style_exponential_decay_to_final_lr():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=123.0)
    s = LrSchedule(opt, base_lr=1.0, warmup_steps=0, decay=0.5, final_ratio=0.01, total_steps=4)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(4):
        s.step()
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs == pytest.approx([1.0, 0.01**0.25, 0.1, 0.01**0.75, 0.01])
    s.end_epoch()  # lr_decay does not apply on top
    s.step()  # nor does the lr fall below final_lr after the planned updates
    assert s.lr == pytest.approx(0.01)
    fresh = LrSchedule(opt, base_lr=1.0, final_ratio=0.01, total_steps=4)
    fresh.load_state_dict({"steps": 2, "epochs": 0})
    assert fresh.lr == pytest.approx(0.1)
    with pytest.raises(ValueError, match="total_steps"):
        LrSchedule(opt, base_lr=1.0, final_ratio=0.1)


def test_final_lr_ratio_from_config():
    assert final_lr_ratio(train_cfg(lr=0.004, final_lr=0.0004)) == pytest.approx(0.1)
    assert final_lr_ratio(train_cfg(lr=0.004)) == 0.0  # configs without the key: per-epoch decay
    for bad in (-1e-4, 0.005):
        with pytest.raises(ValueError, match="train.final_lr"):
            final_lr_ratio(train_cfg(lr=0.004, final_lr=bad))


def test_optimizers():
    p = [torch.nn.Parameter(torch.zeros(2))]
    assert isinstance(build_optimizer(p, train_cfg()), torch.optim.Adam)
    sgd = build_optimizer(p, train_cfg(optimizer="sgd", momentum=0.8))
    assert isinstance(sgd, torch.optim.SGD) and sgd.param_groups[0]["momentum"] == 0.8
    with pytest.raises(ValueError, match="unknown train.optimizer"):
        build_optimizer(p, train_cfg(optimizer="lamb"))


@pytest.mark.parametrize(
    "cfg",
    [
        train_cfg(weight_decay=0.01),
        train_cfg(optimizer="sgd", momentum=0.9, nesterov=True, weight_decay=0.01),
        train_cfg(optimizer="sgd", momentum=0.0),
    ],
)
def test_fused_update_matches_the_per_tensor_loop_to_round_off(cfg):
    """build_optimizer picks torch's fused kernel on the CPU; against the reference loop
    (foreach=False), the same weights and moments after each of five updates, to float32
    round-off: the kernel orders its arithmetic differently, and each step's update (at most lr
    in size under Adam) may differ by a few times lr x float32's epsilon.

    Both take the same gradients each step. Gradients of their own would carry the round-off
    through the LSTM into the next step, where Adam, dividing by the root of a near-zero second
    moment, blows it up to hundreds of times that: a test of the LSTM's sensitivity,
    not of the kernel."""
    torch.manual_seed(0)  # weights that do not depend on which tests ran before on this worker
    models = [torch.nn.LSTM(6, 8), torch.nn.LSTM(6, 8)]
    models[1].load_state_dict(models[0].state_dict())
    fused = build_optimizer(models[0].parameters(), cfg)
    assert fused.param_groups[0]["fused"] is True
    kind = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[cfg.optimizer]
    loop = kind(models[1].parameters(), **{**fused.defaults, "fused": None, "foreach": False})
    gen = torch.Generator().manual_seed(0)
    eps = torch.finfo(torch.float32).eps
    for step in range(1, 6):
        x = torch.randn(5, 2, 6, generator=gen)
        loop.zero_grad()
        models[1](x)[0].pow(2).sum().backward()
        for fused_weight, loop_weight in zip(models[0].parameters(), models[1].parameters()):
            fused_weight.grad = loop_weight.grad.clone()
        fused.step()
        loop.step()
        for a, b in zip(models[0].parameters(), models[1].parameters()):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=8 * cfg.lr * eps * step)
        for a, b in zip(optimizer_moments(fused), optimizer_moments(loop)):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_fused_only_where_torch_has_the_kernel():
    assert fused_kernels([torch.nn.Parameter(torch.zeros(2))])
    assert not fused_kernels([])
    assert not fused_kernels([torch.nn.Parameter(torch.zeros(2, device="meta"))])


@pytest.mark.parametrize(
    "cfg",
    [
        train_cfg(weight_decay=0.01),
        train_cfg(optimizer="sgd", weight_decay=0.01),
        train_cfg(optimizer="sgd", nesterov=True),
        train_cfg(optimizer="sgd", momentum=0.0),
    ],
)
def test_state_created_up_front_changes_no_update(cfg):
    """Against torch's own lazily created state: the same weights and state, bit for bit,
    after each of five updates; before any update the moments exist, all zero, and the
    weights are untouched."""
    models = [torch.nn.Linear(3, 2) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    lazy, eager = (build_optimizer(m.parameters(), cfg) for m in models)
    create_optimizer_state(eager)
    assert all(torch.equal(a, b) for a, b in zip(models[0].parameters(), models[1].parameters()))
    moments = optimizer_moments(eager)
    assert len(moments) == {"adam": 4, "sgd": 2 if cfg.momentum else 0}[cfg.optimizer]
    assert all(not m.any() for m in moments)
    assert all(p.grad is None for p in models[1].parameters())
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        x = torch.randn(4, 3, generator=gen)
        for model, optimizer in zip(models, (lazy, eager)):
            optimizer.zero_grad()
            model(x).pow(2).sum().backward()
            optimizer.step()
        assert all(torch.equal(a, b) for a, b in zip(models[0].parameters(), models[1].parameters()))
        assert all(torch.equal(a, b) for a, b in zip(optimizer_moments(lazy), optimizer_moments(eager)))
    lazy_state, eager_state = (o.state_dict() for o in (lazy, eager))
    assert str(lazy_state["param_groups"]) == str(eager_state["param_groups"])
    assert str({k: v for k, v in lazy_state["state"].items() if v}) == str(
        {k: v for k, v in eager_state["state"].items() if v}
    )


def make_updater(grad_clip=0.0):
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    opt = build_optimizer(model.parameters(), train_cfg(optimizer="sgd", momentum=0.0, lr=0.1))
    return model, Updater(model, opt, LrSchedule(opt, 0.1), grad_clip)


def test_step_is_a_plain_sgd_update_with_clipping():
    model, up = make_updater(grad_clip=1.0)
    x = torch.tensor([[3.0, 4.0]])
    norm = up.step(model(x).sum())  # gradient (3, 4), norm 5, clipped to norm 1
    assert norm == pytest.approx(5.0)
    torch.testing.assert_close(model.weight.data, torch.tensor([[1 - 0.1 * 0.6, 1 - 0.1 * 0.8]]))
    assert up.schedule.steps == 1


def test_non_finite_gradient_skips_the_update(caplog):
    model, up = make_updater()
    before = model.weight.detach().clone()
    norm = up.step(model(torch.tensor([[float("inf"), 1.0]])).sum())
    assert norm != norm or norm == float("inf")
    assert torch.equal(model.weight.data, before) and up.skipped_updates == 1
    assert caplog.text == ""  # nothing read from the device in the step: the loop reports at log rows
    up.report_skipped()
    assert "1 update(s) skipped (non-finite gradient norm" in caplog.text
    up.step(model(torch.tensor([[1.0, 1.0]])).sum())
    assert not torch.equal(model.weight.data, before) and up.skipped_updates == 1  # the next one applies


def test_subclass_hooks_run_in_order():
    calls = []

    class Recording(Updater):
        def gradient_weight(self, weight, usable):
            calls.append(("weight", weight, usable))
            return 0.5  # the loss is scaled by it before backward

        def prepare_mix(self):
            calls.append(("mix", self.model.weight.grad.clone()))
            return "delta"

        def apply_mix(self, mix):
            calls.append(("apply_mix", mix))

        def apply_update(self, found_inf=None):
            calls.append("apply")
            super().apply_update(found_inf)

    model, up = make_updater()
    up.__class__ = Recording
    up.step(model(torch.tensor([[1.0, 2.0]])).sum(), weight=3)
    assert calls[0] == ("weight", 3.0, True)
    assert calls[1][0] == "mix" and calls[1][1].tolist() == [[0.5, 1.0]]  # gradient of 0.5 x the loss
    assert calls[2:] == [("apply_mix", "delta"), "apply"]


def test_state_dict_round_trip():
    model, up = make_updater()
    up.optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    up.schedule.optimizer = up.optimizer
    for _ in range(3):
        up.step(model(torch.randn(4, 2)).pow(2).sum())
    state = up.state_dict()
    model2, up2 = make_updater()
    up2.optimizer = torch.optim.Adam(model2.parameters(), lr=0.1)
    up2.schedule.optimizer = up2.optimizer
    up2.load_state_dict(state)
    assert up2.schedule.steps == 3
    exp_avg = up2.optimizer.state_dict()["state"][0]["exp_avg"]
    torch.testing.assert_close(exp_avg, up.optimizer.state_dict()["state"][0]["exp_avg"])


def test_loss_scaler_scales_unscales_and_skips_overflowing_steps():
    """fp16 training's GradScaler (the GPU path; its arithmetic runs on the CPU too): the
    update equals the unscaled one, an overflow skips the update and halves the scale."""
    model, up = make_updater()
    reference_model, reference = make_updater()
    up.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    x = torch.tensor([[1.0, 2.0]])
    norm = up.step(model(x).sum())
    assert norm == reference.step(reference_model(x).sum())
    torch.testing.assert_close(model.weight, reference_model.weight)
    assert up.scaler.get_scale() == 1024.0
    before = model.weight.detach().clone()
    norm = up.step(model(x).sum() * float("inf"))
    assert not math.isfinite(norm) and up.skipped_updates == 1
    assert torch.equal(model.weight.detach(), before) and up.scaler.get_scale() == 512.0
    assert up.state_dict()["scaler"]["scale"] == 512.0
