"""Device names as users write them (``auto``, ``cpu``, ``cuda``, ``cuda:N``)."""

from __future__ import annotations

import torch

from attnmt.errors import UserError


def resolve_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device {name!r} requested but CUDA is not available")
    return torch.device(name)
