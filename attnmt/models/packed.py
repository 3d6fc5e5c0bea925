"""Linear maps with weights pre-packed for oneDNN, for the CPU step loops.

A step loop multiplies small row blocks (a batch of 64 rows in training, 5 × 64 beam rows in
search) by the same weight matrix at every step. A plain ``addmm`` re-lays the weight out for its
kernel on every call; oneDNN can do that once (``torch.ops.mkldnn._reorder_linear_weight``) and
reuse the packed copy for every step (``torch.ops.mkldnn._linear_pointwise``), which on an AVX2
CPU is 10–40 % faster at these shapes. Where oneDNN is missing (other builds, float64, GPUs)
``pack`` returns the plain weight and ``linear`` falls back to ``F.linear``: same results up to
float rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

_MKLDNN = (
    torch.backends.mkldnn.is_available()
    and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    and hasattr(torch.ops.mkldnn, "_linear_pointwise")
)


@dataclass
class Packed:
    """A weight (out, in) ready for ``linear``, and the plain weight it was made from."""

    weight: torch.Tensor
    packed: torch.Tensor | None  # oneDNN's layout, or None: use ``weight``


def pack(weight: torch.Tensor, rows: int = 64) -> Packed:
    """Pack ``weight`` (out, in) for products with blocks of about ``rows`` rows. The packed copy
    is a snapshot: pack again after the weight changes."""
    weight = weight.detach()
    if _MKLDNN and weight.device.type == "cpu" and weight.dtype == torch.float32:
        return Packed(weight, torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), rows))
    return Packed(weight, None)


def linear(x: torch.Tensor, w: Packed, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x Wᵀ + b for x (..., in); no autograd (the packed copy is not a parameter)."""
    if w.packed is not None and x.dtype == torch.float32:
        return torch.ops.mkldnn._linear_pointwise(x, w.packed, bias, "none", [], "")
    return F.linear(x, w.weight, bias)


def linear_add(x: torch.Tensor, w: Packed, other: torch.Tensor) -> torch.Tensor:
    """x Wᵀ + other, with ``other`` of the result's shape (oneDNN adds it in the same pass)."""
    if w.packed is not None and x.dtype == torch.float32:
        return torch.ops.mkldnn._linear_pointwise.binary(x, other, w.packed, None, "add")
    return torch.addmm(other, x, w.weight.t()) if x.dim() == 2 else F.linear(x, w.weight) + other
