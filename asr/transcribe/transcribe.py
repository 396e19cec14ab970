"""Transcribe audio files with an experiment's model, as the recipe's decode would.

Everything comes from the checkpoint's own config (the whole experiment config training
saved): the log-mel options of features.*, the deltas and compression of the training set's
features, the tokenizer, and for beam search the LM of lm.* with the LM weight and word score
`python -m asr.tune` chose (<exp_dir>/lm_tuning.json; the lm and decode groups as that stage
ran, from <exp_dir>/.hydra/tune/config.yaml). Without that file (or with greedy=True) the
search is greedy CTC, the recipe's decode=greedy.

CMVN of one file, by the training's features.cmvn:
  utterance  the file's own statistics, as every training utterance had its own
  speaker    the file's own statistics: a file is taken to be one speaker's speech (the
             training speakers' statistics are of other voices)
  global     the training set's global statistics (<feats>/<train_set>/cmvn.*)
  none       none
A file is one utterance (no segmentation); multi-channel audio is read from its first
channel, and audio at another sample rate is resampled to features.sample_frequency.

Paths in the saved config are as the training process saw them, often relative to the recipe
directory (`lang/`, `feats/`): they are taken relative to the directory that holds the
experiment as exp_dir names it (recipes/mini for recipes/mini/exp/base), else as they are.
"""

from __future__ import annotations

import io
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import kaldiio
import numpy as np
import torch
from omegaconf import OmegaConf
from scipy import signal

from asr.data.audio import read_recording
from asr.decode.acoustic import load_model
from asr.decode.output import timed_words
from asr.decode.search import ParallelBeamSearch, beam_options, beam_search, beam_spec, greedy_search
from asr.features import cmvn
from asr.features.logmel.extract import compute_features
from asr.features.logmel.options import FbankOptions
from asr.features.featureset import KALDI_AUTOMATIC_COMPRESSION, FeatureLayout, feature_set_dir
from asr.models.checkpoint import CheckpointDir, load_checkpoint
from asr.text.tokenizer import Tokenizer, tokenizer_model_path
from asr.utils.device import select_device
from asr.utils.errors import InputError

log = logging.getLogger(__name__)

TUNING_FILE = "lm_tuning.json"


@dataclass
class Transcript:
    path: str
    words: list[str]


def experiment_config(exp_dir: Path, checkpoint: str):
    """The checkpoint's experiment config, its paths made to work from here."""
    if not exp_dir.is_dir():
        raise InputError(f"{exp_dir}: no such experiment directory")
    path = CheckpointDir(exp_dir / "checkpoints").resolve(checkpoint)
    cfg = OmegaConf.create(load_checkpoint(path)["config"])
    kind = cfg.features.kind
    if kind != "fbank":
        raise InputError(
            f"{exp_dir}: trained on features.kind={kind} features (speaker-adapted, i-vectors or Kaldi's); "
            "asr.transcribe computes log-mel (features.kind=fbank) only: "
            "decode a prepared data dir with python -m asr.decode"
        )
    tuned = exp_dir / ".hydra" / "tune" / "config.yaml"
    if tuned.is_file():  # the LM and search the tune stage used (training's config predates them)
        saved = OmegaConf.load(tuned)
        for group in ("lm", "decode"):
            if group in saved:
                cfg[group] = saved[group]
    root = recipe_root(exp_dir, str(cfg.exp_dir))
    here = lambda p: str(relocated(Path(p), root))  # noqa: E731
    cfg.tokenizer.lang_dir = here(cfg.tokenizer.lang_dir)
    cfg.features.feats_dir = here(cfg.features.feats_dir)
    cfg.lm.dir = here(cfg.lm.dir)
    cfg.exp_dir = str(exp_dir)
    cfg.decode.checkpoint = str(path)
    cfg.decode.tuning_file = str(exp_dir / TUNING_FILE)
    cfg.decode.lm, cfg.decode.lexicon_words, cfg.decode.use_tuned, cfg.decode.jobs = "auto", "auto", True, 1
    return cfg


def recipe_root(exp_dir: Path, saved: str) -> Path | None:
    """The directory the training ran in: exp_dir less the saved exp_dir's relative parts."""
    saved_path = Path(saved)
    if saved_path.is_absolute():
        return None
    parts, tail = exp_dir.resolve().parts, saved_path.parts
    if len(parts) > len(tail) and parts[-len(tail) :] == tail:
        return Path(*parts[: -len(tail)])
    return None


def relocated(path: Path, root: Path | None) -> Path:
    if path.is_absolute() or root is None or path.exists():
        return path
    return root / path


class Transcriber:
    """The experiment's features, model and search, for one file after another."""

    def __init__(self, exp_dir: str | os.PathLike, checkpoint: str = "last", greedy: bool = False, device: str = "cpu"):
        self.cfg = cfg = experiment_config(Path(exp_dir), checkpoint)
        self.device = select_device(device)
        self.options = FbankOptions.from_config(cfg.features)
        train_dir = feature_set_dir(cfg, cfg.data.train_set)
        if not (train_dir / "feat_dim").is_file():
            raise InputError(
                f"{train_dir}: the training set's features are missing (their deltas and CMVN statistics are needed); "
                "run the features stage, or keep them beside the experiment"
            )
        self.layout = FeatureLayout.read(train_dir)
        self.compressed = (train_dir / "compress").is_file() and (train_dir / "compress").read_text().strip() == "true"
        self.unit, self.norm_vars = str(cfg.features.cmvn), bool(cfg.features.norm_vars)
        self.global_stats = cmvn.read_stats(train_dir / "cmvn.scp")["global"] if self.unit == "global" else None
        tuned = Path(cfg.decode.tuning_file).is_file() and not greedy
        self.pool = (
            ParallelBeamSearch(beam_spec(cfg, Tokenizer(tokenizer_model_path(cfg.tokenizer))), 1) if tuned else None
        )
        self.search = beam_search(self.pool, beam_options(cfg)) if self.pool is not None else greedy_search
        self.model, state, path = load_model(
            cfg, "ctc", "not CTC: a frame_ce model's outputs are for Kaldi's decoder", self.device
        )
        self.tokenizer = Tokenizer(tokenizer_model_path(cfg.tokenizer))
        if self.tokenizer.vocab_size != state["model_info"]["num_outputs"]:
            raise InputError(
                f"{self.tokenizer.path}: {self.tokenizer.vocab_size} tokens, "
                f"but {path} has {state['model_info']['num_outputs']} outputs"
            )
        log.info(
            "%s: %s search, CMVN %s",
            path,
            "beam+LM (tuned)" if tuned else "greedy",
            {
                "utterance": "of each file",
                "speaker": "of each file (one speaker)",
                "global": "of the training set",
                "none": "none",
            }[self.unit],
        )

    def features(self, path: str) -> torch.Tensor:
        """The model's input for one file, as the features stage and the reader make it."""
        try:
            samples, rate = read_recording(path)
        except (OSError, ValueError, RuntimeError) as err:  # soundfile's errors for a file it cannot read
            raise InputError(
                f"{path}: not audio the toolkit reads ({str(err).splitlines()[0] if str(err) else type(err).__name__})"
            ) from None
        want = int(self.options.sample_frequency)
        if rate != want:
            log.warning("%s: sampled at %d Hz, resampled to the model's %d Hz", path, rate, want)
            g = np.gcd(rate, want)
            samples = signal.resample_poly(samples.astype(np.float64), want // g, rate // g).astype(np.float32)
        stored = compute_features([samples], self.options)[0]
        if stored.shape[0] == 0:
            raise InputError(f"{path}: {len(samples)} samples, shorter than one frame")
        if self.compressed:  # what the reader of the training features got back
            record = io.BytesIO()
            kaldiio.save_ark(
                record,
                {"x": np.ascontiguousarray(stored, dtype=np.float32)},
                compression_method=KALDI_AUTOMATIC_COMPRESSION,
            )
            record.seek(0)
            stored = next(iter(kaldiio.load_ark(record)))[1]
        feats = self.layout.expand(stored)
        if self.unit != "none":
            stats = self.global_stats if self.global_stats is not None else cmvn.accumulate([feats])
            feats = cmvn.apply(feats, stats, self.norm_vars)
        return torch.from_numpy(np.ascontiguousarray(feats, dtype=np.float32))

    @torch.no_grad()
    def __call__(self, path: str) -> Transcript:
        feats = self.features(path)
        log_probs, out_lens = self.model(
            feats.unsqueeze(0).to(self.device), torch.tensor([feats.shape[0]], device=self.device)
        )
        hyp = self.search(log_probs, out_lens)[0]
        return Transcript(path, [w.word for w in timed_words(hyp, self.tokenizer)])

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
