"""`--help` of every entry point (docs/architecture.md, Entry points): exit 0, a first line
`usage: python -m asr.<name> ...`, for a stage what it reads and writes and its own config keys
only (with values and comments), and no torch imported (Hydra's help took 5-9 s, mostly torch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from asr.bench.__main__ import BENCHMARKS

# module -> keys its help must list (its own groups), keys it must not (other stages' groups)
STAGES = {
    "asr.data.synth": (["synth.out_dir="], ["train.lr="]),
    "asr.data.prepare": (["data.data_dir="], ["synth.out_dir="]),
    "asr.features": (["features.kind=", "features.specaugment."], ["data.data_dir="]),
    "asr.text": (["tokenizer.vocab_size="], ["features.kind="]),
    "asr.lm": (["lm.dir="], ["tokenizer.vocab_size="]),
    "asr.lang": (["lang.dictionary=", "lang.sil_prob=0.5"], ["lm.dir="]),
    "asr.train": (
        ["train.epochs=", "model.hidden_size=", "distributed.algorithm=", "train.log_every_steps=50"],
        ["decode.beam_size="],
    ),
    "asr.tune": (["decode.tune_lm_weights="], ["train.lr="]),
    "asr.decode": (["decode.checkpoint=last", "decode.beam_size="], ["train.lr=", "score.kind="]),
    "asr.score": (["score.kind="], ["decode.beam_size="]),
    "asr.sweep": (["sweep.learners="], ["decode.beam_size="]),
    "asr.sweep.diagnose": (["sweep.diagnostics="], ["decode.beam_size="]),
    "asr.average": (["average.num=5", "average.by=last"], ["train.lr="]),
    "asr.gmm": (["gmm.kind=", "gmm.num_leaves="], ["train.lr="]),
    "asr.gmm.decode": (["gmm.decode_acoustic_scale="], ["train.lr="]),
    "asr.gmm.fmllr_feats": (["gmm.dir=", "gmm.cmvn="], ["train.lr="]),
}
# argparse entry points (tools that take paths): their own --help
OTHERS = [
    "asr.bench",
    "asr.gmm.jobs",
    "asr.bench.link_probe",
    "asr.report",
    "asr.data.validate",
    "asr.data.perturb",
    "asr.data.fix",
    "asr.transcribe",
    "asr.train.phone_ali",
    "asr.utils.recipe_record",
    "asr.utils.experiment_groups",
    "asr.overrides",
]
ASR = Path(__file__).resolve().parents[1] / "asr"

# Runs each entry point's --help in one process, as `python -m` would, and reports its exit
# status, output and whether torch got imported by then.
PROBE = r"""
import contextlib, io, json, runpy, sys
out = {}
for module in sys.argv[1:]:
    sys.argv = [module, "--help"]
    text, code = io.StringIO(), 0
    with contextlib.redirect_stdout(text):
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as end:
            code = end.code or 0
    out[module] = {"code": code, "text": text.getvalue(), "torch": "torch" in sys.modules}
print(json.dumps(out))
"""


def probe(modules):
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", PROBE, *modules], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_every_stage_help_lists_its_own_keys_without_importing_torch():
    modules = list(STAGES) + OTHERS
    results = probe(modules)
    for module, (present, absent) in STAGES.items():
        r = results[module]
        assert r["code"] == 0, (module, r["text"])
        assert r["text"].startswith(f"usage: python -m {module} [key=value ...]  (stage "), (module, r["text"][:200])
        assert not r["torch"], f"{module} --help imported torch"
        assert "reads:" in r["text"] and "writes:" in r["text"], module
        for key in present:
            assert f"  {key}" in r["text"], (module, key)
        for key in absent:
            assert f"  {key}" not in r["text"], (module, key)
        assert "Powered by Hydra" not in r["text"] and "== Config ==" not in r["text"], (
            module
        )  # none of Hydra's boilerplate
    for module in OTHERS:
        r = results[module]
        assert r["code"] == 0 and r["text"].startswith(f"usage: python -m {module}"), (module, r)
        assert not r["torch"], f"{module} --help imported torch"


def test_comments_of_the_schema_are_shown_beside_the_values():
    text = probe(["asr.train"])["asr.train"]["text"]
    line = next(line for line in text.splitlines() if line.strip().startswith("train.keep_checkpoints="))
    assert "# periodic checkpoints kept" in line
    # a block comment above a field is its comment, on one line
    line = next(line for line in text.splitlines() if line.strip().startswith("train.lr_scaling="))
    assert "# Scale lr with the global batch" in line and "relative to lr_reference_frames" in line


def test_help_shows_the_values_the_overrides_compose():
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    done = subprocess.run(
        [sys.executable, "-m", "asr.train", "train.epochs=7", "model=blstm", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0
    assert "train.epochs=7" in [line.split("#")[0].strip() for line in done.stdout.splitlines()]


def test_bench_help_describes_every_benchmark():
    text = probe(["asr.bench"])["asr.bench"]["text"]
    for name in BENCHMARKS:
        line = next(line for line in text.splitlines() if line.strip().startswith(name + " "))
        assert len(line.split()) > 5, line


def entry_points() -> set[str]:
    """Every `python -m` name under asr/: packages with a __main__.py, modules with a main block."""
    found = set()
    for path in ASR.rglob("*.py"):
        parts = path.relative_to(ASR.parent).with_suffix("").parts
        if path.name == "__main__.py":
            found.add(".".join(parts[:-1]))
        elif 'if __name__ == "__main__":' in path.read_text():
            found.add(".".join(parts))
    return found


def test_every_entry_point_has_its_help_checked():
    checked = set(STAGES) | set(OTHERS) | set(BENCHMARKS.values())
    assert entry_points() - checked == set(), "add these to STAGES or OTHERS (and to docs/architecture.md)"


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_benchmark_answers_help(name):
    """A benchmark's help may import what it measures (torch): it runs a real pipeline."""
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "-m", "asr.bench", name, "--help"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"usage: python -m asr.bench {name}"), done.stdout[:200]
