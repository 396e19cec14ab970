"""One tiny synthetic LDC tree for the SWB recipe and quirk tests: Switchboard-1 + MS98, Hub5-2000,
Fisher parts 1 and 2, and every quirk of the real releases; and the two SWB recipes run on it.
The tree lies below a directory whose name holds a space, a quote and a $ (CORPUS_PARENT), so
every recipe test also checks that such paths reach every stage whole.
Each is built once per test session; the two recipes run side by side (most of their time is
process start-up, so two cores finish both in little more than the time of one)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from tests.recipes.conftest import Recipe

REPO = Path(__file__).resolve().parents[2]
QUIRKS = "[asides,missing_side,past_end,shorten,stm_typos,unsorted]"
CORPUS_PARENT = "LDC copies 'v2' $x"  # a path the recipes once cut at the space (and globbed)
_built: dict[str, Path] = {}


def session_dir(prefix: str) -> Path:
    """A temporary directory removed when the test session's interpreter exits."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path


def quirky_corpus() -> Path:
    """The corpus root (built on first use into a temporary directory kept for the session)."""
    if "root" not in _built:
        base = session_dir("swb_corpus_") / CORPUS_PARENT
        base.mkdir()
        env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
        proc = subprocess.run(  # relative paths: the Hydra values need no quoting
            [sys.executable, "-m", "asr.data.synth", "synth=tiny", "synth.out_dir=corpus",
             "synth.fisher_conversations=2", "synth.eval_swb_conversations=1", "synth.eval_callhome_conversations=1",
             f"synth.quirks={QUIRKS}", "exp_dir=exp"],
            cwd=base, env=env, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"synthesis failed:\n{proc.stderr[-3000:]}")
        _built["root"] = base / "corpus"
    return _built["root"]


def quirks_done(root: Path) -> dict:
    return json.loads((root / "synth_summary.json").read_text())["quirks"]


def corpus_options(root: Path, fisher: bool) -> list[str]:
    options = ["--swbd-dir", str(root / "LDC97S62"), "--ms98-dir", str(root / "swb_ms98_transcriptions"),
               "--eval2000-dir", str(root / "LDC2002S09/hub5e_00"), "--eval2000-text-dir", str(root / "LDC2002T43")]
    if fisher:  # one option per directory: the paths hold spaces, so they cannot share --fisher-dirs "A B"
        for folder in ("LDC2004T19", "LDC2005T19", "LDC2004S13", "LDC2005S13"):
            options += ["--fisher-dir", str(root / folder)]
    return options


# Sizes for a CPU test on the tiny corpus: logmel40 instead of the paper's fMLLR features (which
# need a GMM system), a one-layer model, one epoch.
TINY_SWB = [
    "features=logmel40",
    "features.jobs=1",
    "data.dev_utts=20",
    "data.expected_sph_files=4",
    "data.expected_fisher_files=2",
    "model.num_layers=1",
    "model.hidden_size=16",
    "model.bottleneck=8",
    "tokenizer.vocab_size=60",
    "train.epochs=1",
    "train.max_utts=16",
    "train.threads=1",
]


_recipes: dict[str, Recipe] = {}
_lock = threading.Lock()


def _run_all_stages(recipe: Recipe, args: list[str], failures: dict) -> None:
    try:
        recipe.run(*args)
    except AssertionError as err:
        failures[recipe.dir.name] = str(err)


def swb_recipes() -> dict[str, Recipe]:
    """recipes/swb300 and recipes/swb2000 run end to end (experiment `tiny`) on the quirky corpus."""
    with _lock:
        if not _recipes:
            root, base = quirky_corpus(), session_dir("swb_recipes_")
            failures: dict[str, str] = {}
            threads = []
            for name, fisher in (("swb300", False), ("swb2000", True)):
                (base / name).mkdir()
                recipe = Recipe(base / name, name)
                args = ["--exp", "tiny", *corpus_options(root, fisher), *TINY_SWB]
                threads.append(threading.Thread(target=_run_all_stages, args=(recipe, args, failures)))
                _recipes[name] = recipe
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            if failures:
                _recipes.clear()
                raise AssertionError("\n".join(failures.values()))
    return _recipes
