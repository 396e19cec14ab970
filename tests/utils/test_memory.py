import os
import platform
import subprocess
import sys

import numpy as np
import pytest
import torch

from asr.utils.memory import KERNEL_CACHE_VARIABLE, limit_kernel_cache, release_freed_memory

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


def test_a_users_kernel_cache_setting_is_kept(monkeypatch):
    monkeypatch.setenv(KERNEL_CACHE_VARIABLE, "100")
    limit_kernel_cache()
    assert os.environ[KERNEL_CACHE_VARIABLE] == "100"


KERNEL_REUSE = """
import sys, torch
from asr.utils.memory import limit_kernel_cache
if sys.argv[1] == "limit":
    limit_kernel_cache(4)
lstm = torch.nn.LSTM(8, 16, 2, bidirectional=True)
for frames in [5, *range(6, 26), 5]:  # the first shape again after 20 others
    lstm(torch.randn(frames, 2, 8))[0].sum().backward()
"""


def rnn_kernels_reused(mode: str) -> int:
    env = {key: value for key, value in os.environ.items() if key != KERNEL_CACHE_VARIABLE}
    out = subprocess.run(
        [sys.executable, "-c", KERNEL_REUSE, mode],
        env=env | {"ONEDNN_VERBOSE": "profile_create"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sum(1 for line in out.splitlines() if ",create:cache_hit," in line and ",rnn," in line)


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
def test_the_kernel_cache_keeps_only_the_last_shapes_kernels():
    # oneDNN keeps the first shape's LSTM kernels through 20 other shapes by default (the cache
    # that grew by MBs a step in training); limited, they are rebuilt.
    assert rnn_kernels_reused("default") > 0
    assert rnn_kernels_reused("limit") == 0


FREEZE = """
import gc, weakref
from asr.utils.memory import freeze_imports
before = gc.get_freeze_count()
freeze_imports()
frozen = gc.get_freeze_count()
class Node: pass
later = Node(); later.me = later  # a cycle made after the freeze: only the collector frees it
alive = weakref.ref(later)
del later
gc.collect()
print(before, frozen, alive() is None)
"""


def test_what_was_imported_is_frozen_and_what_comes_later_still_collected():
    out = subprocess.run([sys.executable, "-c", FREEZE], capture_output=True, text=True, check=True).stdout.split()
    before, frozen, collected = int(out[0]), int(out[1]), out[2]
    assert before == 0 and frozen > 1000  # the interpreter's and the imported modules' objects
    assert collected == "True"


# The premise of import_optimizer_machinery: making an optimizer imports torch._dynamo. The day
# a torch release stops doing so, the first line prints False and the helper can go.
OPTIMIZER_IMPORTS = """
import gc, sys
import torch
from asr.utils.memory import import_optimizer_machinery
before = "torch._dynamo" in sys.modules
torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
print(before, "torch._dynamo" in sys.modules)
gc.disable()
import_optimizer_machinery()
paused_stays_paused = not gc.isenabled()
gc.enable()
import_optimizer_machinery()
print(paused_stays_paused, gc.isenabled())
"""


def test_an_optimizer_imports_the_compiler_machinery_which_the_helper_imports_first():
    out = subprocess.run([sys.executable, "-c", OPTIMIZER_IMPORTS], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "True", "True"]
