"""Atomic output: write to a temporary name next to the target, then rename.

A reader (or a re-run after a crash) therefore sees either the complete old file or the
complete new one, never a half-written file that looks finished.

Two failures are handled here, once for every writer (checkpoints, features, data dirs...):
  * a full disk (or quota) while writing becomes one `DiskFull` error naming the target and
    its file system, whatever the writing library raised (torch.save, for one, reports it
    as "enforce fail at inline_container.cc ... unexpected pos");
  * temporary names carry the host and process id of their writer, so the next write of the
    same target removes what a killed process (kill -9, power loss) left behind.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path
from typing import IO, Iterator

from asr.utils.errors import InputError

log = logging.getLogger("asr.atomic")

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
# A failed write that left less than this free is taken as a full disk (libraries that do not
# raise OSError leave nothing else to go by; a full file system has less than a block left).
FULL_BELOW_BYTES = 1 << 20
HOST = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "host"


class DiskFull(InputError):
    """No space left (ENOSPC, or a quota) while writing a file; the message names it."""


def _owner_tag() -> str:
    return f"{HOST}+{os.getpid()}"


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp.{_owner_tag()}")


def _stale_pattern(path: Path) -> re.Pattern:
    return re.compile(rf"^\.{re.escape(path.name)}\.(?P<kind>tmp|old)\.(?P<host>[^+]*)\+(?P<pid>\d+)(?:\+.*)?$")


def process_running(pid: int) -> bool:
    """Whether `pid` is a live process of this host. A zombie (killed, not yet reaped by its
    parent) counts as gone: it holds no files and will never write again, and after a kill -9
    of a whole process group it may stay a zombie for seconds until init reaps it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc: kill(0) is all there is to go by
    return state not in ("Z", "X")


def remove_stale(path: str | os.PathLike) -> list[Path]:
    """Remove the temporaries of `path` whose writer, a process of this host, is gone.

    A `.old.` copy (the previous version, moved aside for an instant while a directory was
    swapped) is put back when `path` itself is missing, else removed. Returns what was removed.
    """
    path = Path(path)
    if not path.parent.is_dir():
        return []
    pattern, removed = _stale_pattern(path), []
    for entry in path.parent.iterdir():
        match = pattern.match(entry.name)
        if not match or match["host"] != HOST or process_running(int(match["pid"])):
            continue
        if match["kind"] == "old" and not path.exists():
            os.replace(entry, path)
            log.warning("%s: put back the previous version, which a killed process had moved aside", path)
            continue
        _remove(entry)
        removed.append(entry)
    if removed:
        log.warning(
            "removed %d temporary file(s) of %s left by a killed process: %s",
            len(removed),
            path,
            ", ".join(p.name for p in removed),
        )
    return removed


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            entry.unlink()


def _free_bytes(directory: Path) -> int | None:
    try:
        stat = os.statvfs(directory)
    except OSError:
        return None
    blocks = stat.f_bfree if os.geteuid() == 0 else stat.f_bavail  # root may use the reserved blocks
    return blocks * stat.f_frsize


def _mount_point(directory: Path) -> Path:
    directory = directory.resolve()
    while not os.path.ismount(directory) and directory != directory.parent:
        directory = directory.parent
    return directory


def disk_full_message(err: OSError) -> str:
    """One line for an ENOSPC/EDQUOT OSError raised outside the atomic writers."""
    if not err.filename:
        return f"no space left on device (ENOSPC): {err.strerror}; free space and re-run"
    where = Path(os.fsdecode(err.filename))
    return f"{where}: no space left on device (ENOSPC); free space on {_mount_point(where.parent)} and re-run"


def disk_full_error(err: BaseException, path: Path, tmp: Path) -> DiskFull | None:
    """A DiskFull for `path` when `err` (raised while writing `tmp`) means there was no space."""
    if not isinstance(err, Exception):
        return None  # KeyboardInterrupt, SystemExit: not a write failure
    if isinstance(err, OSError):
        if err.errno not in NO_SPACE:
            return None
    else:
        free = _free_bytes(tmp.parent)
        if free is None or free >= FULL_BELOW_BYTES:
            return None
    return DiskFull(
        f"{path}: no space left on device (ENOSPC) while writing it; free space on "
        f"{_mount_point(tmp.parent)} (or write elsewhere) and re-run: nothing was replaced"
    )


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path; on success it is renamed to `path`, on error removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path)
    tmp = _tmp_name(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as err:
        full = disk_full_error(err, path, tmp)
        _remove(tmp)
        if full is not None:
            raise full from None
        raise


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs) -> Iterator[IO]:
    """open() that only replaces `path` once the with-block finished without error."""
    with atomic_path(path) as tmp:
        with open(tmp, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write(text)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, replace: bool = True) -> Iterator[Path]:
    """Build a whole directory under a temporary name, then swap it in.

    An existing directory at `path` is replaced only after the new one is complete; with
    replace=False it is kept and the new one dropped (content named by its inputs, which a
    concurrent writer of the same inputs finished first while others may be reading it).
    A symbolic link at `path` stays: the directory it names is replaced (a recipe's
    --data-root links its output dirs to another disk).
    """
    path = Path(path)
    if path.is_symlink():
        path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp.{_owner_tag()}+", dir=path.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the result is an ordinary shared directory
    try:
        yield tmp
        if path.exists() and not replace:
            shutil.rmtree(tmp, ignore_errors=True)
        elif path.exists():
            old = path.with_name(f".{path.name}.old.{_owner_tag()}")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException as err:
        full = disk_full_error(err, path, tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        if full is not None:
            raise full from None
        raise
