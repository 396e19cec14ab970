"""Which torch device a stage runs on (config key `device`: auto | cpu | cuda), and what it
computes natively."""

import functools

import torch

from asr.utils.errors import InputError


def select_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"device={name} but no CUDA device is available; use device=cpu or device=auto")
    return torch.device(name)


def native_bf16(device: torch.device) -> bool:
    """Whether the device computes bfloat16 in hardware: a CUDA GPU of compute capability 8.0
    or later (Ampere; a V100 only emulates it), or a CPU on which oneDNN reports bf16 support
    and a bf16 LSTM actually runs (`cpu_bf16_lstm`); elsewhere bf16 is slower than fp32 or
    fails outright."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    try:
        reported = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False
    return reported and cpu_bf16_lstm()


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


def cpu_isa() -> str:
    """The instruction set ATen's CPU kernels run at (DEFAULT, AVX2, AVX512, ...), for messages."""
    return torch.backends.cpu.get_cpu_capability()
