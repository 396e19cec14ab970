"""Finding and running KenLM's programs (`lmplz`, `build_binary`, `query`).

`make install` builds them from the `kenlm` source distribution into `<venv>/kenlm/bin`
(scripts/build_kenlm.sh). They are looked up in, first to last: the `lm.kenlm_bin` config
value, `$KENLM_BIN`, `<sys.prefix>/kenlm/bin` (the running venv), then `$PATH`.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from asr.utils.errors import InputError

log = logging.getLogger(__name__)

KENLM_TOOLS = ("lmplz", "build_binary", "query")


def search_dirs(kenlm_bin: str = "") -> list[Path]:
    dirs = [kenlm_bin, os.environ.get("KENLM_BIN", ""), str(Path(sys.prefix) / "kenlm" / "bin")]
    return [Path(d) for d in dirs if d]


def kenlm_tool(name: str, kenlm_bin: str = "") -> Path:
    """The path of a KenLM program, or an InputError saying how to get it."""
    for directory in search_dirs(kenlm_bin):
        if (directory / name).is_file() and os.access(directory / name, os.X_OK):
            return directory / name
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    looked = ", ".join(str(d) for d in search_dirs(kenlm_bin))
    raise InputError(
        f"KenLM's {name} not found (looked in {looked} and $PATH); run `make install` "
        "(it builds KenLM with scripts/build_kenlm.sh, which needs cmake and Boost) or set lm.kenlm_bin"
    )


def run_tool(command: list[str | os.PathLike], what: str, stdin: str | None = None) -> str:
    """Run a KenLM program; its stdout, or an InputError with the end of its stderr."""
    command = [str(c) for c in command]
    result = subprocess.run(command, input=stdin, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-8:])
        raise InputError(f"{what} failed (exit {result.returncode}): {' '.join(command)}\n{tail}")
    return result.stdout
