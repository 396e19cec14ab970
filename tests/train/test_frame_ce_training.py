"""Frame-level cross-entropy training on Kaldi alignments: it learns, and the stage runs end to end."""

import logging
import re
import time
from types import SimpleNamespace

import kaldiio
import numpy as np
import pytest
import torch
from tests.fixtures.hybrid_corpus import (
    NUM_PDFS,
    binary_transition_model,
    features_for,
    hmm_system,
    hybrid_overrides,
    pdf_means,
    random_alignment,
    text_transition_model,
    write_ali_gz,
    write_hybrid_set,
)

from asr.config import load_config
from asr.decode.stage import decode
from asr.models.blstm import build_model
from asr.models.checkpoint import load_checkpoint
from asr.models.config import ModelConfig
from asr.optim.schedule import LrSchedule, build_optimizer
from asr.optim.updater import Updater
from asr.train import loop
from asr.train.data import collate
from asr.train.frame_targets import subsample_targets
from asr.train.objectives import (
    FrameCeObjective,
    build_objective,
    frame_ce_sum,
    frame_ce_utterance_losses,
    valid_frames,
)
from asr.utils.errors import InputError

torch.set_num_threads(1)

SUBSAMPLE = 2


def toy_batch(num_utts: int, seed: int):
    """Utterances whose frames are their pdf's mean plus noise, with subsampled pdf targets."""
    rng, means = np.random.default_rng(seed), pdf_means()
    items = []
    for i in range(num_utts):
        _, pdfs = random_alignment(rng)
        feats = torch.from_numpy(features_for(pdfs, rng, means))
        items.append((f"u{i}", feats, torch.from_numpy(subsample_targets(pdfs, len(pdfs), SUBSAMPLE))))
    return collate(items)


def frame_accuracy(model, batch) -> float:
    model.eval()
    with torch.no_grad():
        log_probs, out_lens = model(batch.feats, batch.feat_lens)
        best = valid_frames(log_probs, out_lens).argmax(-1)
    model.train()
    return (best == batch.targets).float().mean().item()


def test_frame_ce_learns_from_chance_to_over_90_percent_in_40_updates():
    torch.manual_seed(0)
    cfg = ModelConfig(num_layers=1, hidden_size=32, stack_frames=2, subsample=SUBSAMPLE, dropout=0.0, head="frame_ce")
    model = build_model(cfg, 8, NUM_PDFS)
    optimizer = build_optimizer(model.parameters(), SimpleNamespace(optimizer="adam", lr=0.02, weight_decay=0.0))
    updater = Updater(model, optimizer, LrSchedule(optimizer, 0.02, warmup_steps=5), grad_clip=5.0)
    train, held_out = toy_batch(32, seed=1), toy_batch(16, seed=2)
    majority = np.bincount(held_out.targets.numpy()).max() / held_out.targets.numel()
    initial = frame_accuracy(model, held_out)
    start = time.monotonic()
    for _ in range(40):
        log_probs, out_lens = model(train.feats, train.feat_lens)
        updater.step(frame_ce_sum(log_probs, out_lens, train) / train.targets.numel())
    elapsed = time.monotonic() - start
    final = frame_accuracy(model, held_out)
    print(
        f"held-out frame accuracy {initial:.3f} -> {final:.3f} in {elapsed:.2f} s (chance {1 / NUM_PDFS:.2f}, "
        f"majority {majority:.2f})"
    )
    assert initial < max(0.3, majority + 0.05)
    assert final > 0.9


def test_frame_ce_loss_is_the_mean_negative_log_posterior_of_the_targets():
    log_probs = torch.log_softmax(torch.randn(2, 3, 4), dim=-1)
    batch = collate([("a", torch.zeros(6, 1), torch.tensor([1, 2, 3])), ("b", torch.zeros(3, 1), torch.tensor([0, 1]))])
    out_lens = torch.tensor([3, 2])
    first = -(log_probs[0, 0, 1] + log_probs[0, 1, 2] + log_probs[0, 2, 3])
    second = -(log_probs[1, 0, 0] + log_probs[1, 1, 1])  # its third frame is padding
    per_utterance = frame_ce_utterance_losses(log_probs, out_lens, batch)
    assert per_utterance.tolist() == pytest.approx([first.item(), second.item()], rel=1e-6)
    assert frame_ce_sum(log_probs, out_lens, batch).item() == pytest.approx((first + second).item(), rel=1e-6)


# --- the train stage on files ----------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """train/dev/eval sets; Kaldi alignments of train+dev as ali.N.gz with a text final.mdl."""
    root = tmp_path_factory.mktemp("hybrid")
    train_tids, train_pdfs = write_hybrid_set(root, "train", 48, seed=1)
    # The dev features are one frame longer than their alignments (a different front end).
    dev_tids, dev_pdfs = write_hybrid_set(root, "dev", 12, seed=2, extra_feature_frames=1)
    write_hybrid_set(root, "eval", 6, seed=3)
    alignments = {**train_tids, **dev_tids}
    keys = sorted(alignments)
    write_ali_gz(root / "ali" / "ali.1.gz", {k: alignments[k] for k in keys[::2]})
    write_ali_gz(root / "ali" / "ali.2.gz", {k: alignments[k] for k in keys[1::2]}, binary=False)
    (root / "ali" / "final.mdl").write_text(text_transition_model(*hmm_system()))
    return SimpleNamespace(root=root, train_pdfs=train_pdfs, dev_pdfs=dev_pdfs)


@pytest.fixture(scope="module")
def trained(corpus, caplog_module):
    cfg = load_config(hybrid_overrides(corpus.root))
    trainer = loop.Trainer(cfg)
    before = trainer.evaluate()
    accuracy_before = trainer.dev_metrics["frame_accuracy"]
    loop.train(cfg)
    return SimpleNamespace(cfg=cfg, dev_loss_before=before, accuracy_before=accuracy_before)


@pytest.fixture(scope="module")
def caplog_module():
    """Log records of the module's training run (caplog is function-scoped)."""
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("asr")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_train_stage_learns_frame_targets_from_kaldi_alignments(corpus, trained, caplog_module):
    exp = corpus.root / "exp"
    state = load_checkpoint(exp / "checkpoints" / "last.pt")
    assert state["model_info"]["num_outputs"] == NUM_PDFS and state["model_info"]["config"]["head"] == "frame_ce"
    epoch_lines = [r.getMessage() for r in caplog_module if r.getMessage().startswith("epoch ")]
    accuracies = [float(m) for m in re.findall(r"dev frame accuracy ([0-9.]+)", "\n".join(epoch_lines))]
    print("dev frame accuracy", trained.accuracy_before, "->", accuracies)
    assert len(accuracies) == 4 and trained.accuracy_before < 0.35 and accuracies[-1] > 0.9
    assert state["progress"]["best_dev_loss"] < trained.dev_loss_before / 5
    # Every train and dev utterance kept: the one-frame length difference is tolerated.
    kept = [r.getMessage() for r in caplog_module if "without alignment" in r.getMessage()]
    assert any("kept 48 of 48" in m for m in kept) and any("kept 12 of 12" in m and "0 with lengths" in m for m in kept)


def test_pdf_counts_are_the_training_targets_frequencies(corpus, trained):
    expected = np.zeros(NUM_PDFS, dtype=int)
    for pdfs in corpus.train_pdfs.values():
        centres = np.minimum(np.arange(0, len(pdfs), SUBSAMPLE) + SUBSAMPLE // 2, len(pdfs) - 1)
        np.add.at(expected, pdfs[centres], 1)
    text = (corpus.root / "exp" / "pdf_counts").read_text()
    assert text == " [ " + " ".join(str(c) for c in expected) + " ]\n"


def test_exported_loglikes_have_one_row_per_alignment_frame(corpus, trained):
    """Upsampled to 10 ms: as many rows as feature frames (Kaldi's alignments have as many)."""
    decode(load_config(hybrid_overrides(corpus.root, ["decode.sets=[dev]"])))
    loglikes = kaldiio.load_scp(str(corpus.root / "exp" / "decode_dev" / "loglikes.scp"))
    assert sorted(loglikes) == sorted(corpus.dev_pdfs)
    for utt, pdfs in corpus.dev_pdfs.items():
        matrix = loglikes[utt]
        assert matrix.shape == (len(pdfs) + 1, NUM_PDFS)  # the dev features are one frame longer
        # The trained model's best pdf per 10 ms frame mostly is the aligned one.
        assert (matrix[: len(pdfs)].argmax(1) == pdfs).mean() > 0.8


def test_objective_config_errors_are_clear(corpus):
    with pytest.raises(InputError, match="train.objective=frame_ce trains model.head=frame_ce, but model.head=ctc"):
        build_objective(load_config(hybrid_overrides(corpus.root, ["model.head=ctc"])))
    with pytest.raises(InputError, match="train.objective=frame_ce needs train.alignments"):
        build_objective(load_config(hybrid_overrides(corpus.root, ["train.alignments="])))
    with pytest.raises(InputError, match="model.num_pdfs=12, but .*final.mdl has 10 pdfs"):
        build_objective(load_config(hybrid_overrides(corpus.root, ["model.num_pdfs=12"])))
    with pytest.raises(InputError, match="train.objective='mmi'"):
        build_objective(load_config(hybrid_overrides(corpus.root, ["train.objective=mmi"])))


def test_dev_set_without_alignments_suggests_dev_alignments(corpus, tmp_path):
    train_only = tmp_path / "ali"
    write_ali_gz(train_only / "ali.1.gz", {})
    (train_only / "final.mdl").write_bytes(binary_transition_model(*hmm_system()))
    objective = build_objective(load_config(hybrid_overrides(corpus.root, [f"train.alignments={train_only}"])))
    assert isinstance(objective, FrameCeObjective)
    with pytest.raises(InputError, match=r"(?s)none of its 12 utterances .*set train.dev_alignments"):
        objective.dataset("dev")
    # The dev features are a frame longer than their alignments: too much without tolerance.
    strict = build_objective(load_config(hybrid_overrides(corpus.root, ["train.ali_length_tolerance=0"])))
    assert len(strict.dataset("train")) == 48
    with pytest.raises(InputError, match="none of its 12 utterances .* within 0 frames of its length"):
        strict.dataset("dev")


def test_pdf_alignments_without_num_pdfs_use_the_largest_pdf_id(corpus, tmp_path, caplog):
    pdfs = {**corpus.train_pdfs, **corpus.dev_pdfs}
    write_ali_gz(tmp_path / "pdf.1.gz", {u: p.astype(np.int32) for u, p in pdfs.items()})
    objective = build_objective(
        load_config(hybrid_overrides(corpus.root, [f"train.alignments={tmp_path / 'pdf.1.gz'}"]))
    )
    assert objective.train_alignments.mapping is None  # not Kaldi's ali.N.gz: pdf ids
    objective.dataset("train")
    objective.dataset("dev")
    with caplog.at_level("WARNING"):
        assert objective.num_outputs == NUM_PDFS
    assert "set model.num_pdfs" in caplog.text
