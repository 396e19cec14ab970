"""Which torch device a stage runs on (config key `device`: auto | cpu | cuda), and what it
computes natively."""

import functools
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import torch

from asr.utils.errors import InputError

# oneDNN's CPU ISAs (the names ONEDNN_MAX_CPU_ISA takes) as its bit masks: each ISA sets the bits
# of those below it, and bit 0x80 is AVX512_CORE_BF16's bf16 instructions, which every ISA above
# it (AVX10_1_512, the AMX ones) keeps.
ONEDNN_ISA_MASKS = {
    "SSE41": 0x1,
    "AVX": 0x3,
    "AVX2": 0x7,
    "AVX2_VNNI": 0xF,
    "AVX2_VNNI_2": 0x1F,
    "AVX512_CORE": 0x27,
    "AVX512_CORE_VNNI": 0x67,
    "AVX512_CORE_BF16": 0xE7,
    "AVX10_1_512": 0x1EF,
    "AVX512_CORE_FP16": 0x1EF,
    "AVX10_1_512_AMX": 0xFEF,
    "AVX512_CORE_AMX": 0xFEF,
    "AVX10_1_512_AMX_FP16": 0x1FEF,
    "AVX512_CORE_AMX_FP16": 0x1FEF,
}
ONEDNN_BF16_BIT = 0x80
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo's names for bf16 hardware
# fp32 against bf16 autocast, nn.LSTM(512, 256) forward and backward on 8 x 300 frames, one thread,
# on an AVX-512 Xeon without bf16 hardware (oneDNN emulates it): 138 ms against 446 ms.
EMULATED_BF16_SLOWDOWN = "about 3x slower than fp32"


def select_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"device={name} but no CUDA device is available; use device=cpu or device=auto")
    return torch.device(name)


@dataclass(frozen=True)
class Bf16Support:
    """What a device does with bf16: `native` computes it in hardware (faster than fp32), `runs`
    has a bf16 LSTM at all (perhaps emulated, slower); `reason` says why, for the log."""

    native: bool
    runs: bool
    reason: str


def bf16_support(device: torch.device) -> Bf16Support:
    if device.type == "cuda":
        native = torch.cuda.is_bf16_supported(including_emulation=False)
        why = "the GPU computes bf16" if native else "the GPU has no bf16 hardware (before Ampere)"
        return Bf16Support(native, native, why)
    return cpu_bf16_support(cpu_flags(), os.environ)


def cpu_bf16_support(flags: frozenset[str], environ) -> Bf16Support:
    """bf16 is native on a CPU with AVX512-BF16 or AMX whose oneDNN may use them. oneDNN also runs
    bf16 on any AVX-512 CPU by emulating it, and reports that as support: there it is slower."""
    runs = cpu_bf16_lstm()
    if not runs:
        return Bf16Support(False, False, f"oneDNN has no bf16 LSTM kernel on this CPU (kernels at {cpu_isa()})")
    found = [flag for flag in CPU_BF16_FLAGS if flag in flags]
    if not found:
        reason = f"this CPU has no bf16 hardware (no {' or '.join(CPU_BF16_FLAGS)} flag): oneDNN emulates bf16"
        return Bf16Support(False, True, f"{reason}, {EMULATED_BF16_SLOWDOWN}")
    name, mask = onednn_isa_cap(environ)
    if mask is not None and not mask & ONEDNN_BF16_BIT:
        reason = f"ONEDNN_MAX_CPU_ISA={name} keeps oneDNN below the CPU's bf16 instructions: it emulates bf16"
        return Bf16Support(False, True, f"{reason}, {EMULATED_BF16_SLOWDOWN}")
    return Bf16Support(True, True, f"this CPU computes bf16 in hardware ({', '.join(found)})")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first CPU's feature flags (Linux; elsewhere none, so bf16 is never taken for native)."""
    try:
        with cpuinfo.open() as lines:
            for line in lines:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def cpu_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The first CPU's model name, for a benchmark's report ("unknown" where it cannot be read)."""
    try:
        with cpuinfo.open() as lines:
            for line in lines:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def onednn_isa_cap(environ) -> tuple[str, int | None]:
    """The ISA oneDNN is capped at (ONEDNN_MAX_CPU_ISA, or its older name DNNL_MAX_CPU_ISA) and its
    mask; None where it is not capped or the name is one oneDNN ignores (ALL, DEFAULT, unknown)."""
    name = (environ.get("ONEDNN_MAX_CPU_ISA") or environ.get("DNNL_MAX_CPU_ISA") or "").strip().upper()
    return name, ONEDNN_ISA_MASKS.get(name)


@functools.cache
def cpu_bf16_lstm() -> bool:
    """Whether this CPU runs a bidirectional LSTM's forward and backward under bf16 autocast.

    A runtime probe, not a list of CPU names: oneDNN picks its kernels by the instruction sets
    it finds (and by ONEDNN_MAX_CPU_ISA), and on AVX2-only CPUs it has no bf16 LSTM kernel at
    all ("could not create a primitive descriptor"). About 5 ms, once per process."""
    lstm = torch.nn.LSTM(4, 4, bidirectional=True, batch_first=True)
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, _ = lstm(torch.zeros(1, 2, 4))
        out.float().sum().backward()
    except RuntimeError:
        return False
    return True


def flush_denormals() -> bool:
    """From now on, subnormal floats (below 1.2e-38 in fp32) count as zero on this process's CPU
    (x86's flush-to-zero and denormals-are-zero modes). Returns whether the CPU has them.

    An LSTM whose gates saturate (a run at a large lr) computes subnormal values, which x86 CPUs
    handle in microcode, many times slower than normal ones; what flushing them loses is below
    fp32's smallest normal number. Call it before torch's first parallel operation: a thread
    takes its floating-point mode from the thread that starts it, so torch's pool keeps the mode
    its threads started with."""
    return torch.set_flush_denormal(True)


def cpu_isa() -> str:
    """The instruction set ATen's CPU kernels run at (DEFAULT, AVX2, AVX512, ...), for messages."""
    return torch.backends.cpu.get_cpu_capability()
