"""Linear maps with weights pre-packed for oneDNN, for the CPU step loops.

A step loop multiplies small row blocks (a batch of 64 rows in training, 5 × 64 beam rows in
search) by the same weight matrix at every step. A plain ``addmm`` re-lays the weight out for its
kernel on every call; oneDNN can do that once (``torch.ops.mkldnn._reorder_linear_weight``) and
reuse the packed copy for every step (``torch.ops.mkldnn._linear_pointwise``), which on an AVX2
CPU is 10–40 % faster at these shapes. Where oneDNN is missing (other builds, float64, GPUs)
``pack`` returns the plain weight and ``linear`` falls back to ``F.linear``: same results up to
float rounding.

``pack_int8`` / ``linear`` with an int8 weight: the product in 8-bit integers (oneDNN's
quantised linear, the kernel torch's x86 quantisation lowers to), for the search's output layer
(``attnmt translate --int8``). The weight is rounded per output row (scale max|w_row| / 127);
the input is rounded per call to 7 bits over its own range: AVX2's u8·s8 kernels add products
in pairs into 16 bits, which 8-bit inputs can overflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

_MKLDNN = (
    torch.backends.mkldnn.is_available()
    and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    and hasattr(torch.ops.mkldnn, "_linear_pointwise")
)
INT8 = (
    torch.backends.mkldnn.is_available()
    and hasattr(torch.ops, "onednn")
    and hasattr(torch.ops.onednn, "qlinear_prepack")
    and hasattr(torch.ops.onednn, "qlinear_pointwise")
)


@dataclass
class Packed:
    """A weight (out, in) ready for ``linear``, and the plain weight it was made from."""

    weight: torch.Tensor
    packed: torch.Tensor | None  # oneDNN's layout, or None: use ``weight``
    int8: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # (packed q, scale, zero)


def pack(weight: torch.Tensor, rows: int = 64) -> Packed:
    """Pack ``weight`` (out, in) for products with blocks of about ``rows`` rows. The packed copy
    is a snapshot: pack again after the weight changes."""
    weight = weight.detach()
    if _MKLDNN and weight.device.type == "cpu" and weight.dtype == torch.float32:
        return Packed(weight, torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), rows))
    return Packed(weight, None)


def pack_int8(weight: torch.Tensor, rows: int = 64) -> Packed:
    """``weight`` (out, in) as int8 rows q with scales s (W ≈ diag(s) q), packed for oneDNN's
    quantised product with blocks of about ``rows`` rows (CPU, float32 weights; see INT8)."""
    weight = weight.detach()
    if not INT8 or weight.device.type != "cpu" or weight.dtype != torch.float32:
        raise ValueError("int8 products need torch's oneDNN quantised linear on CPU, float32 weights")
    scale = (weight.abs().amax(dim=1) / 127).clamp_min(torch.finfo(torch.float32).tiny)
    q = torch.round(weight / scale.unsqueeze(1)).clamp_(-127, 127).to(torch.int8)
    zero = torch.zeros(weight.size(0), dtype=torch.long)
    return Packed(weight, None, (torch.ops.onednn.qlinear_prepack(q, [rows, weight.size(1)]), scale, zero))


def _linear_int8(x: torch.Tensor, w: Packed, bias: torch.Tensor | None) -> torch.Tensor:
    """x Wᵀ + b through 8-bit integers: x rounded to 7-bit steps over [min(x, 0), max(x, 0)]."""
    qw, w_scale, w_zero = w.int8
    lo, hi = (float(v) for v in torch.aminmax(x))
    if not (math.isfinite(lo) and math.isfinite(hi)):  # nothing to round: as the float product
        return F.linear(x, w.weight, bias)
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 127 or 1.0
    zero = round(-lo / scale)
    flat = x.reshape(-1, x.size(-1))
    qx = torch.round(flat * (1 / scale)).add_(zero).clamp_(0, 127).to(torch.uint8)
    y = torch.ops.onednn.qlinear_pointwise(qx, scale, zero, qw, w_scale, w_zero, bias, 1.0, 0,
                                           torch.float32, "none", [], "")
    return y.view(*x.shape[:-1], y.size(-1))


def linear(x: torch.Tensor, w: Packed, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x Wᵀ + b for x (..., in); no autograd (the packed copy is not a parameter)."""
    if w.int8 is not None:
        return _linear_int8(x, w, bias)
    if w.packed is not None and x.dtype == torch.float32:
        return torch.ops.mkldnn._linear_pointwise(x, w.packed, bias, "none", [], "")
    return F.linear(x, w.weight, bias)


def linear_add(x: torch.Tensor, w: Packed, other: torch.Tensor) -> torch.Tensor:
    """x Wᵀ + other, with ``other`` of the result's shape (oneDNN adds it in the same pass)."""
    if w.packed is not None and x.dtype == torch.float32:
        return torch.ops.mkldnn._linear_pointwise.binary(x, other, w.packed, None, "add")
    return torch.addmm(other, x, w.weight.t()) if x.dim() == 2 else F.linear(x, w.weight) + other
