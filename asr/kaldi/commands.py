"""Commands in data files, and when they run.

Kaldi lets a data dir name its inputs by commands: a wav.scp entry `cmd ... |` is the output of
`cmd`, and so is a feats.scp or cmvn.scp entry (kaldiio reads them the same way). Kaldi runs
them through the shell (popen), so whoever wrote a data dir can run anything as whoever reads
it: **a data dir is trusted code**. The policy here:

  * our own writers never write an entry that needs a shell: the Switchboard and Hub5 entries
    (`sph2pipe -f wav -p -c N file |`) and speed perturbation (`... | sox ... speed F |`) are
    Kaldi's forms, which asr.data.audio reads natively, without running anything;
  * `python -m asr.data.validate` and `python -m asr.data.fix` never run a command unless given
    `--run-commands`; they say which entries they did not run (and so could not check);
  * the stages that must read the audio or features (features, train, decode, ...) run them
    through /bin/sh as Kaldi does, and log once per file how many there are; with
    `data.run_commands=false` such an entry is an error naming its file and line instead.

The policy is process-wide: stage entry points set it from the config, validate and fix from
their option.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
from pathlib import Path
from typing import Callable, Iterator

from asr.kaldi.table import iter_table
from asr.utils.errors import InputError

log = logging.getLogger("asr.kaldi.commands")

RUN_HINT = "a data dir is trusted code: check it, then pass data.run_commands=true"
_allowed = True
_reported: set[str] = set()


class CommandNotRun(InputError):
    """An entry that is a command, met while commands may not run; the message names it."""


def configure(run: bool) -> None:
    global _allowed
    _allowed = bool(run)


def allowed() -> bool:
    return _allowed


@contextlib.contextmanager
def policy(run: bool) -> Iterator[None]:
    """Run (or refuse) commands inside the with-block only."""
    before = _allowed
    configure(run)
    try:
        yield
    finally:
        configure(before)


def is_pipe(value: str) -> bool:
    """Kaldi's `cmd |` input (kaldiio also takes `| cmd`)."""
    value = value.strip()
    return value.endswith("|") or value.startswith("|")


def run_command(command: str, where: str) -> bytes:
    """The standard output of `command`, run by /bin/sh as Kaldi's popen runs it.

    `where` names the entry (file and key, or file:line) for the messages.
    """
    if not _allowed:
        raise CommandNotRun(f"{where}: the entry is a command ({command!r}), not run: {RUN_HINT}")
    proc = subprocess.run(["/bin/sh", "-c", command], capture_output=True)
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip()[-300:].replace("\n", " | ")
        raise InputError(f"{where}: command failed with exit status {proc.returncode}: {command!r}: {tail}")
    return proc.stdout


def commands_in(path: str | os.PathLike, command_of: Callable[[str], str | None]) -> list[tuple[int, str, str]]:
    """(line, key, command) for each entry of the table `path` that `command_of` says runs one.
    Every command is a pipe (`cmd |`, `| cmd`), so a table without a '|' byte has none, and is
    not parsed line by line (a learner checks its feats.scp and cmvn.scp at start-up): it is read
    in blocks of 64 KB."""
    if not _has_byte(path, b"|"):
        return []
    return [(lineno, key, command) for lineno, key, value in iter_table(path) if (command := command_of(value))]


def _has_byte(path: str | os.PathLike, byte: bytes, block: int = 1 << 16) -> bool:
    with open(path, "rb") as f:
        while data := f.read(block):
            if byte in data:
                return True
    return False


def check_table(path: str | os.PathLike, command_of: Callable[[str], str | None]) -> int:
    """Apply the policy to the commands of one table before it is read: refuse the first one
    (naming its line) when commands may not run, else log once how many will run."""
    path = Path(path)
    found = commands_in(path, command_of)
    if not found:
        return 0
    lineno, key, command = found[0]
    if not _allowed:
        raise CommandNotRun(
            f"{path}:{lineno}: entry {key} is a command ({command!r}), not run ({len(found)} such entries): {RUN_HINT}"
        )
    if str(path) not in _reported:
        _reported.add(str(path))
        log.warning(
            "%s: %d entries are commands, run by /bin/sh as Kaldi does (a data dir is trusted code; "
            "data.run_commands=false refuses them), e.g. line %d: %s",
            path,
            len(found),
            lineno,
            command,
        )
    return len(found)


def scp_command(value: str) -> str | None:
    """The command a kaldiio scp entry (feats.scp, cmvn.scp) runs, or None for an ark offset."""
    return value.strip().strip("|").strip() if is_pipe(value) else None


def load_scp(path: str | os.PathLike):
    """kaldiio's lazy dict of an scp, after the policy has seen its pipe entries."""
    import kaldiio

    check_table(path, scp_command)
    return kaldiio.load_scp(str(path))
