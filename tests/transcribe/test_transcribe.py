"""python -m asr.transcribe: a tiny log-mel experiment trained on sentences eSpeak speaks, then
a wav of one of them transcribed through the CLI; its errors are one line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from asr.config import load_config
from asr.data.datadir import DataDir, write_data_dir
from asr.data.synth.channel import RATE, to_phone_rate
from asr.data.synth.espeak import Espeak
from asr.features.recipes import make_features
from asr.text.tokenizer import build_tokenizer
from asr.train import loop

torch.set_num_threads(1)
pytestmark = pytest.mark.slow  # trains a model on speech: about a minute

SENTENCES = ["yes okay", "no right", "well yes", "okay no", "right well"]
VOICES = ["en-us+m1", "en-us+f2", "en+m3"]


def speak(text: str, voice: str, path: Path) -> None:
    speech = Espeak.instance().synthesize(text, voice, 150, 50, 50)
    samples = to_phone_rate(speech.samples, speech.rate)
    pad = np.zeros(RATE // 5, dtype=np.float32)
    soundfile.write(path, np.concatenate([pad, samples, pad]).astype(np.int16), RATE, subtype="PCM_16")


def write_spoken_set(root: Path, name: str, voices: list[str]) -> None:
    data, audio = DataDir(), root / "audio"
    audio.mkdir(parents=True, exist_ok=True)
    for v, voice in enumerate(voices):
        for s, text in enumerate(SENTENCES):
            utt = f"spk{v}-{name}{s:02d}"
            path = audio / f"{utt}.wav"
            speak(text, voice, path)
            data.wav_scp[utt], data.utt2spk[utt], data.text[utt] = str(path), f"spk{v}", text
    write_data_dir(data, root / "data" / name)


def overrides(root: Path, *extra: str) -> list[str]:
    return [
        f"data.data_dir={root / 'data'}",
        "data.train_set=train",
        "data.dev_set=dev",
        "data.eval_set=dev",
        f"features.feats_dir={root / 'feats'}",
        "features=logmel40",
        "features.jobs=1",
        "features.cmvn=utterance",
        f"tokenizer.lang_dir={root / 'lang'}",
        "tokenizer=bpe300",
        "tokenizer.vocab_size=30",
        f"exp_dir={root / 'exp' / 'spoken'}",
        "model.num_layers=1",
        "model.hidden_size=64",
        "model.dropout=0.0",
        "train.epochs=100",
        "train.max_utts=5",
        "train.lr=0.02",
        "train.warmup_steps=2",
        "train.final_lr=0.0",
        "train.lr_decay=1.0",
        "train.threads=1",
        "train.tensorboard=false",
        "train.plot=false",  # a loss.png drawn at each of 100 epochs, which no test here reads
        "train.checkpoint_every_steps=1000",
        "device=cpu",
        *extra,
    ]


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    root = tmp_path_factory.mktemp("spoken")
    write_spoken_set(root, "train", VOICES)
    write_spoken_set(root, "dev", VOICES[:1])
    cfg = load_config(overrides(root))
    make_features(cfg)
    build_tokenizer(root / "data" / "train" / "text", cfg.tokenizer)
    loop.train(cfg)
    return root


def transcribe(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return subprocess.run(
        [sys.executable, "-m", "asr.transcribe", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


def test_a_wav_comes_out_as_words_the_recipes_decode_gives(experiment):
    """Training wavs through the CLI give what the decode stage gives for those utterances
    (same features, CMVN, model and search), and that is words the model learnt."""
    from asr.decode.stage import decode
    from asr.kaldi.table import read_table

    decode(load_config(overrides(experiment, "decode.sets=[train]")))
    recipe = read_table(experiment / "exp" / "spoken" / "decode_train" / "hyp.txt", allow_empty_value=True)
    utts = ["spk0-train00", "spk1-train01", "spk2-train04"]
    wavs = [str(experiment / "audio" / f"{utt}.wav") for utt in utts]
    done = transcribe(str(experiment / "exp" / "spoken"), *wavs)
    assert done.returncode == 0, done.stderr
    assert [line.split() for line in done.stdout.splitlines()] == [
        [wav, *recipe[utt].split()] for wav, utt in zip(wavs, utts)
    ]
    assert "greedy search, CMVN of each file" in done.stderr
    vocabulary = {w for s in SENTENCES for w in s.split()}
    said = [w for utt in utts for w in recipe[utt].split()]
    assert all(recipe[utt].split() for utt in utts) and all(w.isalpha() and w.islower() for w in said), said
    # words, most of them right: a minute's training on 15 utterances still slips (`es okay`)
    assert sum(w in vocabulary for w in said) >= len(said) / 2, said


def test_features_equal_those_the_recipe_trained_on(experiment):
    from asr.data.datadir import read_data_dir
    from asr.features.featureset import FeatureReader
    from asr.transcribe.transcribe import Transcriber

    transcriber = Transcriber(experiment / "exp" / "spoken")
    reader = FeatureReader(
        experiment / "feats" / "logmel40" / "train", read_data_dir(experiment / "data" / "train").utt2spk
    )
    for utt in ("spk0-train00", "spk2-train03"):
        torch.testing.assert_close(
            transcriber.features(str(experiment / "audio" / f"{utt}.wav")), reader(utt), atol=1e-4, rtol=0
        )
    transcriber.close()


def test_cmvn_of_one_file_follows_the_training_unit(experiment):
    """utterance (this experiment) and speaker: the file's own statistics; global: the set's."""
    from asr.features import cmvn
    from asr.transcribe.transcribe import Transcriber

    transcriber = Transcriber(experiment / "exp" / "spoken")
    wav = str(experiment / "audio" / "spk0-train00.wav")
    own = transcriber.features(wav).numpy()
    transcriber.unit = "none"
    raw = transcriber.features(wav).numpy()
    np.testing.assert_allclose(own, cmvn.apply(raw, cmvn.accumulate([raw])), atol=1e-5)
    transcriber.unit, transcriber.global_stats = (
        "global",
        cmvn.accumulate([raw[:20]]),
    )  # stand-in training-set statistics
    np.testing.assert_allclose(transcriber.features(wav).numpy(), cmvn.apply(raw, transcriber.global_stats), atol=1e-5)
    assert not np.allclose(transcriber.features(wav).numpy(), own, atol=1e-2)
    transcriber.close()


def test_errors_are_one_line_and_exit_2(experiment, tmp_path):
    done = transcribe(str(experiment / "exp" / "spoken"), str(tmp_path / "missing.wav"))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and "missing.wav: no such audio file" in done.stderr

    # an experiment trained on other features than log-mel
    other = tmp_path / "fmllr" / "exp"
    (other / "checkpoints").mkdir(parents=True)
    state = torch.load(experiment / "exp" / "spoken" / "checkpoints" / "last.pt", weights_only=True)
    state["config"]["features"]["kind"] = "fmllr"
    torch.save(state, other / "checkpoints" / "last.pt")
    wav = experiment / "audio" / "spk0-train00.wav"
    done = transcribe(str(other), str(wav))
    assert done.returncode == 2 and done.stdout == ""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "features.kind=fmllr" in lines[0] and "log-mel" in lines[0], done.stderr

    text = tmp_path / "notes.wav"
    text.write_text("not audio\n")
    done = transcribe(str(experiment / "exp" / "spoken"), str(text))
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert done.returncode == 2 and len(errors) == 1 and "notes.wav" in errors[0] and "Traceback" not in done.stderr

    done = transcribe(str(tmp_path / "no-such-exp"), str(wav))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "no such experiment" in done.stderr


def test_with_a_tuned_lm_the_search_is_beam_and_lm(experiment, tmp_path):
    from asr.lm.tools import kenlm_tool
    from asr.utils.errors import InputError

    try:
        kenlm_tool("lmplz")
    except InputError:
        pytest.skip("KenLM tools not built (make install runs scripts/build_kenlm.sh)")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    lm = [
        "lm.orders=[2]",
        "lm.decode_order=2",
        "lm.perplexity_sets=[]",
        "decode=beam_lm",
        "decode.jobs=1",
        "decode.tune_lm_weights=[0.5]",
        "decode.tune_word_scores=[0.0]",
    ]
    for stage in ("asr.lm", "asr.tune"):
        done = subprocess.run(
            [sys.executable, "-m", stage, *overrides(experiment, *lm)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    wav = tmp_path / "said.wav"
    speak("yes okay", VOICES[0], wav)
    done = transcribe(str(experiment / "exp" / "spoken"), str(wav))
    assert done.returncode == 0, done.stderr
    assert (
        "beam+LM (tuned) search" in done.stderr and "LM weight 0.5, word score 0: tuned on the dev set" in done.stderr
    )
    words = done.stdout.split()[1:]
    assert words and set(words) <= {w for s in SENTENCES for w in s.split()}  # the lexicon's words only
    done = transcribe(str(experiment / "exp" / "spoken"), str(wav), "--greedy")
    assert done.returncode == 0 and "greedy search" in done.stderr
