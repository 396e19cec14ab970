"""Run a recipe's run.sh in a scratch copy of the repository layout.

The recipe scripts are copied into tmp/recipes/<name>/ and tmp/scripts/ is linked to the
real scripts, so the recipe writes its corpus, data, feats and exp dirs under tmp only. The
`asr` package (and its conf/) comes from the installed toolkit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.processes import repo_pythonpath

REPO = Path(__file__).resolve().parents[2]

# A model and schedule small enough for a CPU test, on the `tiny` synthetic corpus.
TINY = [
    "synth=tiny",
    "data.dev_utts=20",
    "model.num_layers=1",
    "model.hidden_size=32",
    "tokenizer.vocab_size=60",
    "train.epochs=2",
    "train.max_utts=16",
    "train.threads=1",
    "features.jobs=1",
]


def done_stages(exp_dir: Path) -> list[str]:
    """The stages run.sh recorded as done in `exp_dir`, as `<N>.<stage>` (from
    .done/<N>.<stage>.record.json), sorted."""
    return sorted(p.name.removesuffix(".record.json") for p in (exp_dir / ".done").glob("*.record.json"))


class Recipe:
    def __init__(self, root: Path, name: str):
        self.dir = root / "recipes" / name
        self.dir.mkdir(parents=True)
        shutil.copy(REPO / "recipes" / name / "run.sh", self.dir / "run.sh")
        (root / "scripts").symlink_to(REPO / "scripts")
        self.env = dict(
            os.environ,
            PATH=os.pathsep.join(
                [str(REPO / "tests" / "warm_python"), str(Path(sys.executable).parent), os.environ["PATH"]]
            ),
            ASR_WARM_PYTHON=sys.executable,
            OMP_NUM_THREADS="1",
            PYTHONPATH=repo_pythonpath(),  # as the torchrun tests': one fork server serves both
            PYTHONUNBUFFERED="1",
        )

    def command(self, *args: str) -> list[str]:
        return ["bash", str(self.dir / "run.sh"), *args]

    def run(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            self.command(*args), cwd=self.dir, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"run.sh {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
            )
        return proc

    def start(self, *args: str, log: Path) -> subprocess.Popen:
        """Start run.sh in its own process group (so the whole tree can be killed)."""
        return subprocess.Popen(
            self.command(*args),
            cwd=self.dir,
            env=self.env,
            stdout=open(log, "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@pytest.fixture(scope="module")
def mini_recipe(tmp_path_factory) -> Recipe:
    return Recipe(tmp_path_factory.mktemp("mini"), "mini")
