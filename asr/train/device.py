"""Which torch device a stage runs on (config key `device`: auto | cpu | cuda)."""

import torch

from asr.utils.errors import InputError


def select_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"device={name} but no CUDA device is available; use device=cpu or device=auto")
    return torch.device(name)
