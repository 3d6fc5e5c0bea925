"""Device names as users write them (``auto``, ``cpu``, ``cuda``, ``cuda:N``)."""

from __future__ import annotations

import torch

from attnmt.config import DEVICE_NAME
from attnmt.errors import UserError


def resolve_device(name: str = "auto") -> torch.device:
    if not isinstance(name, str) or not DEVICE_NAME.fullmatch(name):
        raise UserError(f"device must be auto, cpu, cuda or cuda:N, not {name!r}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device {name!r} requested but CUDA is not available")
    if name.startswith("cuda:") and int(name[5:]) >= torch.cuda.device_count():
        raise UserError(f"device {name!r}: there are {torch.cuda.device_count()} CUDA devices")
    return torch.device(name)
