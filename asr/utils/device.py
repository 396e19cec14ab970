"""Which torch device a stage runs on (config key `device`: auto | cpu | cuda), and what it
computes natively."""

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
    or later (Ampere; a V100 only emulates it), or a CPU with AVX512-BF16/AMX (oneDNN's check);
    elsewhere bf16 would be emulated and slower than fp32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False
