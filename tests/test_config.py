"""The composed config is checked against the schema before any stage work: each value a stage
could not use and each unknown key (even one added with +) is one line naming the option, and
the stage exits 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from asr.config import load_config
from asr.utils.errors import InputError

# The values of the issue, and what the message must say.
BAD_VALUES = [
    ("train.max_utts=0", "train.max_utts=0: must be at least 1"),
    ("train.optimizer=adamw", "train.optimizer='adamw': choose one of adam, sgd"),
    ("model.hidden_size=0", "model.hidden_size=0: must be at least 1"),
    ("train.lr=-1", "train.lr=-1.0: must be greater than 0"),
    ("train.threads=0", "train.threads=0: must be at least 1"),
    (
        "+train.epochz=1",
        "train.epochz: unknown key (not in TrainConfig, asr/train/config.py); did you mean train.epochs?",
    ),
    (
        "+features.fmllr.dimm=3",
        "features.fmllr.dimm: unknown key (not in FmllrConfig, asr/features/config.py); "
        "did you mean features.fmllr.dim?",
    ),
    ("features.specaugment.time_ratio=1.5", "features.specaugment.time_ratio=1.5: must be in [0.0, 1.0]"),
    ("lm.orders=[3,0]", "lm.orders=[3, 0]: 0: must be at least 1"),
    ("data.prepare_sets=[train,test]", "data.prepare_sets=['train', 'test']: 'test': choose one of train, dev, eval"),
    ("device=gpu", "device='gpu': choose auto, cpu, cuda or cuda:N"),
]


@pytest.mark.parametrize("override, message", BAD_VALUES)
def test_each_bad_value_is_named(override, message):
    with pytest.raises(InputError) as caught:
        load_config([override])
    assert str(caught.value) == f"invalid config: {message}"


def test_all_problems_at_once():
    with pytest.raises(InputError) as caught:
        load_config(["train.lr=0", "model.dropout=1", "+foo=1"])
    lines = str(caught.value).splitlines()
    assert lines[0] == "invalid config, 3 problems:"
    assert sorted(line.strip() for line in lines[1:]) == [
        "foo: unknown key (not in AsrConfig, asr/config.py)",
        "model.dropout=1.0: must be in [0.0, 1.0)",
        "train.lr=0.0: must be greater than 0",
    ]


def test_every_shipped_config_is_valid():
    conf = os.path.join(os.path.dirname(__file__), "..", "conf")
    for group in (
        "experiment",
        "features",
        "decode",
        "score",
        "distributed",
        "tokenizer",
        "synth",
        "data",
        "train",
        "model",
    ):
        for name in sorted(os.listdir(os.path.join(conf, group))):
            load_config([f"{group}={name.removesuffix('.yaml')}"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("+train.epochz=1", "invalid config: train.epochz: unknown key"),  # the schema check, before any stage work
        ("train.epochz=1", "Could not override 'train.epochz'"),  # Hydra's own message, before the job: exit 2 too
    ],
)
def test_a_stage_exits_2_before_any_work(tmp_path, override, message):
    proc = subprocess.run(
        [sys.executable, "-m", "asr.train", f"exp_dir={tmp_path / 'exp'}", override],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "exp" / "train_config.yaml").exists() and not (tmp_path / "exp" / "checkpoints").exists()


def test_the_demo_trains_with_the_single_process_global_batch():
    """`make demo` runs mini_ssgd on --nproc learners: per learner, train=mini's batch split."""
    makefile = Path(__file__).parents[1] / "Makefile"
    [demo] = re.findall(r"^DEMO \?= (.*)$", makefile.read_text(), flags=re.M)
    learners = int(re.search(r"--nproc (\d+)", demo).group(1))
    [preset] = re.findall(r"experiment=(\S+)", demo)
    single, split = load_config([]), load_config([f"experiment={preset}"])
    assert learners > 1 and split.distributed.algorithm == "ssgd"
    assert split.train.max_utts * learners == single.train.max_utts
    assert split.train.max_frames * learners == single.train.max_frames
    assert split.train.threads * learners <= single.train.threads
    assert {k: v for k, v in split.train.items() if k not in ("max_utts", "max_frames", "threads")} == {
        k: v for k, v in single.train.items() if k not in ("max_utts", "max_frames", "threads")
    }
