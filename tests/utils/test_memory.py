import os
import platform

import numpy as np
import pytest

from asr.utils.memory import release_freed_memory

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_freed_holes_in_the_heap_go_back_to_the_system():
    # 64 KB arrays lie on the heap (below malloc's mmap threshold); freeing every other one
    # leaves holes between live arrays, which free() alone keeps resident.
    arrays = [np.ones(8192) for _ in range(2048)]
    del arrays[::2]
    freed = 1024 * 8192 * 8
    before = resident_bytes()
    assert release_freed_memory()
    released = before - resident_bytes()
    assert released > freed / 2, f"released {released / 2**20:.1f} MB of {freed / 2**20:.0f} MB freed"
    assert all(float(a[-1]) == 1.0 for a in arrays)  # what is live is untouched


def test_without_glibc_it_says_so(monkeypatch):
    import asr.utils.memory as memory

    monkeypatch.setattr(memory, "_malloc_trim", lambda: None)
    assert memory.release_freed_memory() is False
