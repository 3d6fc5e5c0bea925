"""Small helpers shared by the models and the search."""

from __future__ import annotations

from typing import Any

import torch


def select_batch(obj: Any, index: torch.Tensor) -> Any:
    """Pick batch rows ``index`` from every tensor in a nested state (batch on dimension 0).

    Works on tensors, dicts, lists, tuples, None and objects with a ``select(index)`` method, so
    beam search can reorder any model's decoder state without knowing its structure.
    """
    if obj is None:
        return None
    if isinstance(obj, torch.Tensor):
        return obj.index_select(0, index)
    if hasattr(obj, "select") and not isinstance(obj, (dict, list, tuple)):
        return obj.select(index)
    if isinstance(obj, dict):
        return {k: select_batch(v, index) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(select_batch(v, index) for v in obj)
    return obj


def lengths_to_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """(B,) lengths -> (B, S) bool mask, True on real positions."""
    max_len = int(lengths.max()) if max_len is None else max_len
    return torch.arange(max_len, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


def init_uniform_(module: torch.nn.Module, scale: float) -> None:
    """The paper's initialisation: every parameter uniform in [-scale, scale]."""
    for p in module.parameters():
        torch.nn.init.uniform_(p, -scale, scale)
