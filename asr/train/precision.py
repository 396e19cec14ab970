"""In which precision training computes (`train.precision`: fp32 | bf16 | fp16 | auto)."""

import contextlib

import torch

from asr.utils.device import cpu_isa, native_bf16
from asr.utils.errors import InputError


def training_precision(name: str, device: torch.device) -> str:
    """fp32, bf16 or fp16; auto picks bf16 where the hardware has it, else fp16 on GPUs (with a
    loss scaler: V100s and older) and fp32 on CPUs."""
    if name == "auto":
        if native_bf16(device):
            return "bf16"
        return "fp16" if device.type == "cuda" else "fp32"
    if name not in ("fp32", "bf16", "fp16"):
        raise InputError(f"train.precision={name!r}; choose fp32, bf16, fp16 or auto")
    if name == "fp16" and device.type != "cuda":
        raise InputError(
            "train.precision=fp16 needs a CUDA device (CPUs' LSTM kernels have no float16); use bf16 or fp32"
        )
    if name == "bf16" and device.type == "cpu" and not native_bf16(device):
        raise InputError(
            f"train.precision=bf16: this CPU (kernels at {cpu_isa()}) has no bf16 LSTM kernel "
            "(oneDNN needs AVX512-BF16 or AMX); use train.precision=auto or train.precision=fp32"
        )
    return name


def use_ieee_fp32(device: torch.device, precision: str) -> None:
    """fp32 on a GPU computes in IEEE fp32. On Ampere and later GPUs PyTorch lets cuDNN (the
    LSTM) round fp32 inputs to TF32, a 10-bit mantissa: on the toy corpus that moved the weights
    by 0.008 from the CPU's over 15 updates, where IEEE fp32 stays within 1e-5. Whoever wants
    the speed of reduced precision asks for it (`auto`: bf16 on those GPUs)."""
    if device.type != "cuda" or precision != "fp32":
        return
    rnn = getattr(torch.backends.cudnn, "rnn", None)
    if hasattr(rnn, "fp32_precision"):  # torch 2.9 and later (their legacy flags refuse to mix)
        rnn.fp32_precision = "ieee"
        torch.backends.cuda.matmul.fp32_precision = "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False


def autocast(device: torch.device, precision: str):
    """Mixed precision for the forward pass: matrix products (the LSTM's too) in bfloat16 or
    float16, weights, gradients and the optimizer in fp32; a no-op for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.float16 if precision == "fp16" else torch.bfloat16)


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """fp16 needs its loss scaled so that small gradients do not underflow; bf16 and fp32 do not."""
    return torch.amp.GradScaler(device.type) if precision == "fp16" else None
