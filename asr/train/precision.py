"""In which precision training computes (`train.precision`: fp32 | bf16 | fp16 | auto)."""

import contextlib
import logging

import torch

from asr.utils.device import bf16_support
from asr.utils.errors import InputError

log = logging.getLogger(__name__)


def training_precision(name: str, device: torch.device) -> str:
    """fp32, bf16 or fp16; auto picks bf16 where the hardware computes it (faster than fp32), else
    fp16 on GPUs (with a loss scaler: V100s and older) and fp32 on CPUs, and logs why."""
    if name not in ("fp32", "bf16", "fp16", "auto"):
        raise InputError(f"train.precision={name!r}; choose fp32, bf16, fp16 or auto")
    if name == "fp16" and device.type != "cuda":
        raise InputError(
            "train.precision=fp16 needs a CUDA device (CPUs' LSTM kernels have no float16); use bf16 or fp32"
        )
    if name == "fp32" or name == "fp16":
        return name
    bf16 = bf16_support(device)
    if name == "auto":
        chosen = "bf16" if bf16.native else "fp16" if device.type == "cuda" else "fp32"
        log.info("train.precision=auto: %s, as %s", chosen, bf16.reason)
        return chosen
    if device.type == "cpu" and not bf16.runs:
        raise InputError(
            f"train.precision=bf16: {bf16.reason} (oneDNN needs AVX-512); "
            "use train.precision=auto or train.precision=fp32"
        )
    if device.type == "cpu" and not bf16.native:
        log.warning("train.precision=bf16: %s; train.precision=auto trains in fp32 here", bf16.reason)
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
