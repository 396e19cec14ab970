"""asr.utils.atomic: a full disk becomes one DiskFull naming the target, and the temporaries of a
killed writer are removed by the next write of the same target (put back, for a directory's
previous version moved aside)."""

from __future__ import annotations

import errno
import subprocess
import sys

import pytest

from asr.utils import atomic
from asr.utils.atomic import DiskFull, atomic_dir, atomic_open, atomic_path, remove_stale
from asr.utils.errors import InputError


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    return int(proc.stdout)


def test_enospc_while_writing_is_one_error_naming_the_target(tmp_path):
    target = tmp_path / "out" / "feats.ark"
    with pytest.raises(DiskFull) as caught:
        with atomic_open(target, "wb"):
            raise OSError(errno.ENOSPC, "No space left on device")
    message = str(caught.value)
    assert message.startswith(f"{target}: no space left on device (ENOSPC)") and "\n" not in message
    assert isinstance(caught.value, InputError)  # stage entry points: one line, exit 2
    assert list(target.parent.iterdir()) == []  # nothing half-written left


def test_a_library_error_on_a_full_file_system_is_a_disk_full(tmp_path, monkeypatch):
    # torch.save on a full disk raises RuntimeError("[enforce fail at inline_container.cc:...]
    # unexpected pos ..."): only the free space tells it is a full disk.
    monkeypatch.setattr(atomic, "_free_bytes", lambda directory: 0)
    with pytest.raises(DiskFull, match="best.pt: no space left"):
        with atomic_path(tmp_path / "best.pt"):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
    monkeypatch.setattr(atomic, "_free_bytes", lambda directory: 10 << 30)
    with pytest.raises(RuntimeError, match="unexpected pos"):  # with space left it is what it says
        with atomic_path(tmp_path / "best.pt"):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")


def test_other_errors_and_interrupts_pass_through(tmp_path):
    with pytest.raises(OSError) as caught:
        with atomic_dir(tmp_path / "set"):
            raise OSError(errno.EACCES, "Permission denied")
    assert caught.value.errno == errno.EACCES
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(tmp_path / "x"):
            raise KeyboardInterrupt


def test_temporaries_of_a_dead_writer_are_removed_by_the_next_write(tmp_path):
    host, pid = atomic.HOST, dead_pid()
    stale_dir = tmp_path / f".train.tmp.{host}+{pid}+abc123"
    (stale_dir / "sub").mkdir(parents=True)
    (stale_dir / "sub" / "feats.ark").write_bytes(b"\0" * 1000)
    stale_file = tmp_path / f".train.tmp.{host}+{pid}"
    stale_file.write_text("half")
    live = tmp_path / f".train.tmp.{host}+{atomic.os.getpid()}+live"  # a writer still at work
    live.mkdir()
    other_host = tmp_path / f".train.tmp.otherhost+{pid}+x"  # pids of other hosts say nothing here
    other_host.mkdir()
    unrelated = tmp_path / ".train2.tmp.x+1"
    unrelated.mkdir()
    with atomic_dir(tmp_path / "train") as tmp:
        (tmp / "feats.scp").write_text("a b\n")
    assert not stale_dir.exists() and not stale_file.exists()
    assert live.is_dir() and other_host.is_dir() and unrelated.is_dir()
    assert (tmp_path / "train" / "feats.scp").read_text() == "a b\n"


def test_a_previous_version_moved_aside_by_a_killed_swap_is_put_back(tmp_path):
    aside = tmp_path / f".train.old.{atomic.HOST}+{dead_pid()}"
    aside.mkdir()
    (aside / "text").write_text("the complete previous version\n")
    assert remove_stale(tmp_path / "train") == []
    assert (tmp_path / "train" / "text").read_text() == "the complete previous version\n"


def test_a_directory_behind_a_link_is_replaced_and_the_link_kept(tmp_path):
    """A recipe's --data-root links its output dirs to another disk: writing through the link
    replaces the directory it names, never the link."""
    (tmp_path / "disk/corpus").mkdir(parents=True)
    (tmp_path / "disk/corpus/old").write_text("previous\n")
    (tmp_path / "corpus").symlink_to(tmp_path / "disk/corpus")
    with atomic_dir(tmp_path / "corpus") as tmp:
        (tmp / "new").write_text("made\n")
    assert (tmp_path / "corpus").is_symlink() and (tmp_path / "disk/corpus/new").read_text() == "made\n"
    assert not (tmp_path / "disk/corpus/old").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "disk"]
