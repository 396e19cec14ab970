"""A tiny learnable corpus for training and decoding tests.

Each word is a fixed random feature pattern held for a few frames, with noisy silence
between words, so a small BLSTM-CTC can learn it in seconds. Written in the on-disk
formats the stages exchange: Kaldi data dirs, kaldiio features with feat_dim,
utt2num_frames and CMVN statistics, and a sentencepiece tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import kaldiio
import numpy as np

from asr.config import load_config
from asr.data.datadir import DataDir, Segment, write_data_dir
from asr.features.cmvn import compute_stats, write_stats
from asr.text.tokenizer import build_tokenizer

WORDS = ["yes", "no", "okay", "right", "well", "[noise]"]
FEAT_DIM = 6
FRAMES_PER_WORD = 6
SILENCE_FRAMES = 2


def word_patterns(seed: int = 123) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {w: rng.normal(0, 2, FEAT_DIM) for w in WORDS}


def render(words: list[str], rng: np.random.Generator, patterns: dict[str, np.ndarray]) -> np.ndarray:
    frames = [np.zeros((SILENCE_FRAMES, FEAT_DIM))]
    for word in words:
        frames.append(np.tile(patterns[word], (FRAMES_PER_WORD, 1)))
        frames.append(np.zeros((SILENCE_FRAMES, FEAT_DIM)))
    mat = np.concatenate(frames)
    return (mat + rng.normal(0, 0.3, mat.shape)).astype(np.float32)


def write_set(root: Path, set_name: str, num_utts: int, seed: int, feats_name: str = "toy") -> dict[str, list[str]]:
    """Data dir <root>/data/<set> and features <root>/feats/<feats_name>/<set>; returns utt -> words."""
    rng = np.random.default_rng(seed)
    patterns = word_patterns()
    data = DataDir()
    feats_dir = root / "feats" / feats_name / set_name
    feats_dir.mkdir(parents=True, exist_ok=True)
    mats, transcripts = {}, {}
    for i in range(num_utts):
        speaker = f"sw0{4000 + i % 3}-A"
        words = [str(w) for w in rng.choice(WORDS, size=rng.integers(1, 5))]
        start = 10.0 * i + 1.0
        mat = render(words, rng, patterns)
        utt = f"{speaker}_{round(start * 100):06d}-{round((start + len(mat) / 100) * 100):06d}"
        mats[utt], transcripts[utt] = mat, words
        data.text[utt] = " ".join(words)
        data.utt2spk[utt] = speaker
        data.segments[utt] = Segment(speaker, start, start + len(mat) / 100)
        data.wav_scp[speaker] = f"/dev/null/{speaker}.wav"
        data.reco2file_and_channel[speaker] = (speaker.split("-")[0], speaker.split("-")[1])
    write_data_and_features(root / "data" / set_name, data, feats_dir, mats)
    return transcripts


def write_data_and_features(data_dir: Path, data: DataDir, feats_dir: Path, mats: dict[str, np.ndarray]) -> None:
    """A set's Kaldi data dir and its features (ark/scp, feat_dim, utt2num_frames, global CMVN)."""
    write_data_dir(data, data_dir)
    with kaldiio.WriteHelper(f"ark,scp:{feats_dir / 'feats.ark'},{feats_dir / 'feats.scp'}") as writer:
        for utt in sorted(mats):
            writer(utt, mats[utt])
    (feats_dir / "feat_dim").write_text(f"{next(iter(mats.values())).shape[1]}\n")
    (feats_dir / "utt2num_frames").write_text("".join(f"{u} {len(mats[u])}\n" for u in sorted(mats)))
    # Global CMVN: per-utterance means would shift a word's pattern with the words around it.
    write_stats(compute_stats("global", mats, data.utt2spk), feats_dir, "global")


def write_toy_corpus(root: Path, num_train: int = 40, num_dev: int = 8) -> None:
    """Data dirs and features for the train, dev and eval sets under `root`."""
    write_set(root, "train", num_train, seed=1)
    write_set(root, "dev", num_dev, seed=2)
    write_set(root, "eval", num_dev, seed=3)


def make_toy_experiment(root: Path, num_train: int = 40, num_dev: int = 8, extra: list[str] | None = None):
    """Write the toy corpus and its tokenizer under `root`; return the composed config."""
    root = Path(root)
    write_toy_corpus(root, num_train, num_dev)
    cfg = toy_config(root, extra)
    build_tokenizer(root / "data" / "train" / "text", cfg.tokenizer)
    return cfg


def toy_config(root: Path, extra: list[str] | None = None):
    return load_config(toy_overrides(root, extra))


def toy_overrides(root: Path, extra: list[str] | None = None) -> list[str]:
    """Hydra overrides pointing every stage at the toy corpus, with a tiny fast model."""
    overrides = [
        f"data.data_dir={root / 'data'}",
        "data.train_set=train",
        "data.dev_set=dev",
        "data.eval_set=eval",
        f"features.feats_dir={root / 'feats'}",
        "features.name=toy",
        f"tokenizer.lang_dir={root / 'lang'}",
        "tokenizer=bpe300",  # the toy words are letter patterns BPE learns whole
        "tokenizer.vocab_size=40",
        f"exp_dir={root / 'exp'}",
        "model.num_layers=1",
        "model.hidden_size=24",
        "model.stack_frames=2",
        "model.subsample=2",
        "model.dropout=0.1",
        "train.epochs=2",
        "train.max_frames=400",
        "train.max_utts=8",
        "train.lr=0.01",
        "train.warmup_steps=2",
        "train.lr_decay=0.9",
        "train.final_lr=0.0",  # per-epoch decay: the tests below know its lr values
        "train.checkpoint_every_steps=3",
        "train.log_every_steps=2",
        "train.threads=1",
        "device=cpu",
    ]
    return overrides + (extra or [])
