"""Which torch device a stage runs on (config key `device`: auto | cpu | cuda), and in which
precision training computes (`train.precision`: fp32 | bf16 | auto)."""

import contextlib

import torch

from asr.utils.errors import InputError


def select_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"device={name} but no CUDA device is available; use device=cpu or device=auto")
    return torch.device(name)


def native_bf16(device: torch.device) -> bool:
    """Whether the device computes bfloat16 in hardware: CUDA with bf16 support, or a CPU with
    AVX512-BF16/AMX (oneDNN's check); elsewhere bf16 would be emulated and slower than fp32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def training_precision(name: str, device: torch.device) -> str:
    """fp32 or bf16; auto picks bf16 where the hardware has it."""
    if name == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    if name not in ("fp32", "bf16"):
        raise InputError(f"train.precision={name!r}; choose fp32, bf16 or auto")
    return name


def autocast(device: torch.device, precision: str):
    """Mixed precision for the forward pass: matrix products (the LSTM's too) in bfloat16,
    weights, gradients and the optimizer in fp32; a no-op for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)
