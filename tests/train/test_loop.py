"""The training stage end to end on the toy corpus: outputs, exact resume, config guard."""

import shutil

import pytest
import torch
from tests.fixtures.cpu import needs_cpu_bf16_lstm
from tests.fixtures.host_reads import count_host_reads
from tests.fixtures.toy_corpus import make_toy_experiment, toy_config

from asr.models.checkpoint import CheckpointDir, load_checkpoint
from asr.train import loop, objectives
from asr.train.record import read_record, record_path
from asr.train.trainlog import TrainLog
from asr.utils.errors import InputError
from asr.utils.threads import torch_threads

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Corpus + tokenizer made once; each test copies it (experiments are written inside)."""
    root = tmp_path_factory.mktemp("toy")
    make_toy_experiment(root)
    return root


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    """An uninterrupted two-epoch run: the reference the other tests compare with."""
    root = tmp_path_factory.mktemp("trained") / "toy"
    shutil.copytree(corpus, root)
    loop.train(toy_config(root, ["train.plot=true"]))
    return root


@pytest.fixture
def root(corpus, tmp_path):
    shutil.copytree(corpus, tmp_path / "toy")
    return tmp_path / "toy"


class Crash(Exception):
    pass


def crash_after(monkeypatch, batches: int):
    """Make training die like a killed process after `batches` batches."""
    original = loop.Trainer.train_batch
    count = {"n": 0}

    def train_batch(self, batch):
        if count["n"] == batches:
            raise Crash
        count["n"] += 1
        original(self, batch)

    monkeypatch.setattr(loop.Trainer, "train_batch", train_batch)


def final_weights(exp):
    return load_checkpoint(exp / "checkpoints" / "last.pt")["model"]


def test_training_writes_checkpoints_log_plot_and_snapshot(trained, caplog):
    exp = trained / "exp"
    last = exp / "checkpoints" / "last.pt"
    state = load_checkpoint(last)
    sampler = state["sampler"]
    assert state["epoch"] == 2 and (sampler["epoch"], sampler["batches_done"], sampler["num_utts"]) == (2, 0, 40)
    assert sampler["trained"].tolist() == [0] * 5  # nothing of epoch 3 yet (40 utterances, 8 per byte)
    assert state["model_info"]["input_dim"] == 6 and state["model_info"]["num_outputs"] == 40
    best = load_checkpoint(exp / "checkpoints" / "best.pt")["progress"]
    assert best["dev_loss"] == best["best_dev_loss"] == state["progress"]["best_dev_loss"]

    rows = TrainLog(exp).rows
    epoch_ends = [r for r in rows if r.dev_loss == r.dev_loss]
    assert [r.epoch for r in epoch_ends] == [1, 2] and epoch_ends[-1].step == state["step"]
    assert [r.step for r in rows] == sorted(r.step for r in rows)
    assert epoch_ends[1].dev_loss < epoch_ends[0].dev_loss  # it learns
    assert rows[0].lr == pytest.approx(0.01) and epoch_ends[1].lr == pytest.approx(0.01 * 0.9**2)
    header = (exp / "train_log.csv").read_text().splitlines()[0]
    assert header == "step,epoch,train_loss,dev_loss,lr,elapsed_s"
    assert (exp / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "hidden_size: 24" in (exp / "train_config.yaml").read_text()

    mtime = last.stat().st_mtime_ns
    with caplog.at_level("INFO"):
        loop.train(toy_config(trained))  # a re-run of a finished stage does nothing
    assert last.stat().st_mtime_ns == mtime and "already trained" in caplog.text


def test_final_lr_is_reached_at_the_last_update(root):
    loop.train(toy_config(root, ["train.final_lr=0.001"]))
    rows = TrainLog(root / "exp").rows
    total = rows[-1].step
    assert rows[0].lr == pytest.approx(0.01 * 0.1 ** (rows[0].step / total))  # warm-up (2 steps) is over
    assert rows[-1].lr == pytest.approx(0.001)
    assert all(a.lr > b.lr for a, b in zip(rows, rows[1:]) if a.step < b.step)  # every update, across epochs


def test_without_the_plot_the_log_is_written_all_the_same(root):
    loop.train(toy_config(root, ["train.epochs=1", "train.plot=false"]))
    assert not (root / "exp" / "loss.png").exists()  # `trained` plots: train.plot=true, the default
    assert [r.epoch for r in TrainLog(root / "exp").rows if r.dev_loss == r.dev_loss] == [1]


def test_training_puts_the_callers_thread_count_back(root):
    """The stage computes on train.threads; a process that goes on after it (a notebook, this
    test) finds torch on the count it had."""
    with torch_threads(1):
        assert loop.train(toy_config(root, ["train.threads=2", "train.max_steps=1"])) is None
        assert torch.get_num_threads() == 1


RECORD = ["train.record_utterances=true"]


def training_utts(root):
    return [line.split()[0] for line in (root / "data" / "train" / "text").read_text().splitlines()]


@pytest.mark.parametrize("corrupt_newest", [False, True])
def test_resume_after_crash_equals_uninterrupted_run(trained, root, monkeypatch, caplog, corrupt_newest):
    expected = final_weights(trained / "exp")
    per_epoch = load_checkpoint(trained / "exp" / "checkpoints" / "last.pt")["step"] // 2
    crash = per_epoch + 4  # mid-epoch 2, after at least one mid-epoch checkpoint (every 3 steps)
    saved = sorted(set(range(3, crash + 1, 3)) | {per_epoch})[-3:]  # keep_checkpoints=3
    crashed = root
    with monkeypatch.context() as m:
        crash_after(m, crash)
        with pytest.raises(Crash):
            loop.train(toy_config(crashed, RECORD))
    ckpts = CheckpointDir(crashed / "exp" / "checkpoints")
    assert [p.name for p in ckpts.periodic()] == [f"step-{s:09d}.pt" for s in saved]
    assert not ckpts.last.exists()
    if corrupt_newest:
        ckpts.periodic()[-1].write_bytes(b"truncated")
    with caplog.at_level("INFO"):
        loop.train(toy_config(crashed, RECORD))
    assert f"resumed from step {saved[-2] if corrupt_newest else saved[-1]}" in caplog.text
    assert ("falling back" in caplog.text) == corrupt_newest
    assert sum(m.startswith("epoch 2/2: train loss") for m in caplog.messages) == 1  # one line per epoch

    got = final_weights(crashed / "exp")
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name
    # The log has no duplicate rows for the steps trained twice.
    assert log_columns(crashed / "exp") == log_columns(trained / "exp")
    # The record holds the steps of the weights: every utterance once an epoch, steps 1, 2, ...
    rows = read_record(record_path(crashed / "exp", 0))
    assert [step for _, step, _ in rows] == list(range(1, 2 * per_epoch + 1))
    utts = sorted(training_utts(crashed))
    for epoch in (1, 2):
        assert sorted(u for e, _, batch in rows if e == epoch for u in batch) == utts


def log_columns(exp):
    """train_log.csv without the elapsed time, NaN as None so rows compare equal."""
    clean = lambda x: None if x != x else x  # noqa: E731
    return [(r.step, r.epoch, clean(r.train_loss), clean(r.dev_loss), r.lr) for r in TrainLog(exp).rows]


def test_changed_model_config_is_refused_unless_forced(root, monkeypatch, caplog):
    with monkeypatch.context() as m:
        crash_after(m, 4)
        with pytest.raises(Crash):
            loop.train(toy_config(root))
    with pytest.raises(InputError, match=r"model.hidden_size: 24 -> 32") as err:
        loop.train(toy_config(root, ["model.hidden_size=32"]))
    assert "train.force=true" in str(err.value)
    with pytest.raises(InputError, match=r"features.norm_vars: True -> False"):
        loop.train(toy_config(root, ["features.norm_vars=false"]))
    # Forced, a change the checkpoint cannot hold is still an error, naming the reason.
    with pytest.raises(InputError, match="does not fit the configured model"):
        loop.train(toy_config(root, ["model.hidden_size=32", "train.force=true"]))
    # Where the corpus lives is not part of what the model sees; a forced dropout change works.
    with caplog.at_level("WARNING"):
        loop.train(toy_config(root, ["model.dropout=0.2", "train.force=true", "data.swbd_dir=/elsewhere"]))
    assert "model.dropout: 0.1 -> 0.2" in caplog.text and "swbd_dir" not in caplog.text
    assert "dropout: 0.2" in (root / "exp" / "train_config.yaml").read_text()
    loop.train(toy_config(root, ["model.dropout=0.2", "data.swbd_dir=/again/elsewhere"]))  # the new snapshot holds


def poison(monkeypatch, which: str):
    """Make the second forward pass's CTC loss NaN for its first utterance ('one') or all ('all');
    returns the batch sizes of every forward pass."""
    original = objectives.ctc_utterance_losses
    sizes = []

    def poisoned(log_probs, out_lens, batch):
        sizes.append(len(batch.utts))
        losses = original(log_probs, out_lens, batch)
        if len(sizes) == 2:
            losses = losses.clone()
            losses[: 1 if which == "one" else len(losses)] = float("nan")
        return losses

    monkeypatch.setattr(objectives, "ctc_utterance_losses", poisoned)
    return sizes


def test_an_utterance_with_a_non_finite_loss_is_left_out_and_named(root, monkeypatch, caplog):
    sizes = poison(monkeypatch, "one")
    with caplog.at_level("WARNING"):
        loop.train(toy_config(root, ["train.epochs=1"]))
    bad = (root / "exp" / "bad_utterances.txt").read_text().splitlines()
    assert len(bad) == 1 and bad[0].startswith("step 1 epoch 1: non-finite loss, left out: sw0")
    assert sizes[2] == sizes[1] - 1  # the same batch again, without it
    assert "non-finite loss for 1 of" in caplog.text
    state = load_checkpoint(root / "exp" / "checkpoints" / "last.pt")
    assert state["progress"]["bad_utterances"] == 1
    assert state["updater"]["schedule"]["steps"] == state["step"]  # every batch gave an update
    assert all(torch.isfinite(t).all() for t in state["model"].values())


def test_a_batch_of_only_non_finite_losses_gives_no_update(root, monkeypatch):
    poison(monkeypatch, "all")
    loop.train(toy_config(root, ["train.epochs=1"]))
    state = load_checkpoint(root / "exp" / "checkpoints" / "last.pt")
    assert state["progress"]["bad_utterances"] > 1
    assert state["updater"]["schedule"]["steps"] == state["step"] - 1  # one batch gave no update
    assert all(torch.isfinite(t).all() for t in state["model"].values())


def test_training_precision_choice(monkeypatch):
    from asr.train import precision
    from asr.train.precision import autocast, grad_scaler, training_precision
    from asr.utils.device import Bf16Support, bf16_support

    cpu = torch.device("cpu")
    assert training_precision("fp32", cpu) == "fp32"
    with pytest.raises(InputError, match="train.precision=fp16 needs a CUDA device"):
        training_precision("fp16", cpu)  # oneDNN has no float16 LSTM on most CPUs
    assert training_precision("auto", cpu) == ("bf16" if bf16_support(cpu).native else "fp32")
    with pytest.raises(InputError, match="train.precision='fp8'"):
        training_precision("fp8", cpu)
    # A GPU without native bf16 (a V100) trains in fp16 with a loss scaler; an A100 in bf16.
    for native, expected in ((False, "fp16"), (True, "bf16")):
        support = Bf16Support(native, native, "a GPU")
        monkeypatch.setattr(precision, "bf16_support", lambda device, support=support: support)
        assert training_precision("auto", torch.device("cuda")) == expected
    assert (
        grad_scaler("fp16", cpu) is not None and grad_scaler("bf16", cpu) is None and grad_scaler("fp32", cpu) is None
    )
    a = torch.randn(4, 4)
    with autocast(cpu, "bf16"):
        assert (a @ a).dtype == torch.bfloat16
    with autocast(cpu, "fp16"):
        assert (a @ a).dtype == torch.float16
    with autocast(cpu, "fp32"):
        assert (a @ a).dtype == torch.float32


@pytest.mark.parametrize(
    "device,precision,ieee", [("cuda", "fp32", True), ("cuda", "bf16", False), ("cpu", "fp32", False)]
)
def test_fp32_on_a_gpu_is_ieee_fp32_not_tf32(device, precision, ieee):
    """PyTorch lets cuDNN's LSTM round fp32 to TF32 on Ampere and later; train.precision=fp32
    turns that off (the settings are plain attributes: this runs without a GPU)."""
    from asr.train.precision import use_ieee_fp32

    settings = torch.backends.cudnn.rnn, torch.backends.cuda.matmul
    saved = [s.fp32_precision for s in settings]
    try:
        for s in settings:
            s.fp32_precision = "tf32"
        use_ieee_fp32(torch.device(device), precision)
        assert [s.fp32_precision for s in settings] == (["ieee"] * 2 if ieee else ["tf32"] * 2)
    finally:
        for s, value in zip(settings, saved):
            s.fp32_precision = value


@pytest.mark.parametrize(
    "native,runs,expected",
    [(True, True, "bf16"), (False, True, "fp32"), (False, False, "fp32")],
    ids=["bf16 hardware", "emulated bf16", "no bf16 kernel"],
)
def test_cpu_precision_follows_the_bf16_hardware(monkeypatch, caplog, native, runs, expected):
    """`auto` picks bf16 only where the CPU computes it and logs why; `bf16` runs where oneDNN
    emulates it, with a warning naming the slowdown, and is refused where no kernel exists."""
    from asr.train import precision
    from asr.train.precision import training_precision
    from asr.utils.device import Bf16Support

    support = Bf16Support(native, runs, "the reason")
    monkeypatch.setattr(precision, "bf16_support", lambda device: support)
    cpu = torch.device("cpu")
    caplog.set_level("INFO", logger=precision.__name__)
    assert training_precision("auto", cpu) == expected
    assert f"train.precision=auto: {expected}, as the reason" in caplog.text
    caplog.clear()
    if not runs:
        with pytest.raises(InputError, match=r"train.precision=bf16: the reason .*train.precision=auto"):
            training_precision("bf16", cpu)
        return
    assert training_precision("bf16", cpu) == "bf16"
    warned = [r for r in caplog.records if r.levelname == "WARNING"]
    assert bool(warned) == (not native)
    assert not warned or "the reason; train.precision=auto trains in fp32 here" in warned[0].getMessage()


def test_bf16_probe_agrees_with_a_real_bf16_lstm():
    """The probe says yes exactly when a model-sized BLSTM runs under bf16 autocast here."""
    from asr.utils.device import cpu_bf16_lstm

    lstm = torch.nn.LSTM(40, 32, num_layers=2, bidirectional=True, batch_first=True)
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            lstm(torch.randn(3, 17, 40))[0].float().sum().backward()
        runs = True
    except RuntimeError:
        runs = False
    assert cpu_bf16_lstm() == runs


@needs_cpu_bf16_lstm()
def test_bf16_training_learns_as_fp32_does(corpus, tmp_path, caplog):
    caplog.set_level("INFO")
    dev = {}
    for precision in ("fp32", "bf16"):
        root = tmp_path / precision
        shutil.copytree(corpus, root)
        loop.train(toy_config(root, [f"train.precision={precision}"]))
        assert f"training on cpu in {precision}" in caplog.text
        dev[precision] = [r.dev_loss for r in TrainLog(root / "exp").rows if r.dev_loss == r.dev_loss]
    print(dev)
    assert dev["bf16"][1] < dev["bf16"][0]
    assert abs(dev["bf16"][-1] - dev["fp32"][-1]) < 0.1 * dev["fp32"][0]


def test_off_a_terminal_training_logs_progress_every_log_every_steps(root, caplog):
    """stderr is no terminal under pytest (as in a SLURM log): no progress bar, so a plain line
    every train.log_every_steps (2 in the toy config) with step, epoch, loss, lr, frames/s, ETA."""
    with caplog.at_level("INFO", logger="asr.train.loop"):
        trainer = loop.Trainer(toy_config(root, ["train.epochs=1"]))
        trainer.run()
    lines = [m for m in caplog.messages if m.startswith("step ")]
    steps_per_epoch = trainer.total_steps
    assert len(lines) == steps_per_epoch // 2 >= 2
    first = lines[0]
    assert first.startswith(f"step 2/{steps_per_epoch} epoch 1/1: loss "), first
    assert ", lr " in first and " frames/s, ETA " in first
    assert "nan" not in first and lines[-1].endswith("ETA 0s")


def test_duration_is_short_and_readable():
    assert [loop.duration(s) for s in (42.4, 185, 3720, float("nan"))] == ["42s", "3m05s", "1h02m", "?"]


def test_a_training_step_reads_the_device_once(root, monkeypatch):
    """Issue 52: the token count, the non-finite check and the stop request in one read; the
    clip norm, the skip decision and the loss stay on the device (read at log rows)."""
    per_step, _ = count_host_reads(monkeypatch.setattr)
    loop.train(toy_config(root, ["train.epochs=1", "train.grad_clip=5"]))
    assert len(per_step) >= 4 and all(reads == ["tolist"] for reads in per_step), per_step
    lines = (root / "exp" / "train_log.csv").read_text().splitlines()
    assert len(lines) > 2 and "nan" not in "".join(lines[1:])  # the losses were read where logged
