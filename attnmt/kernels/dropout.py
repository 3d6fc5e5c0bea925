"""Dropout (Srivastava et al. 2014) with cheap masks, and fused with what follows or precedes it.

Definition (``torch.nn.functional.dropout(x, p, training=True)``): each element is kept with
probability 1 − p and scaled by 1 / (1 − p), else zeroed; the gradient goes through the same
mask and scale. Here:

    dropout(x, p, training)          == F.dropout(x, p, training)
    dropout_add(res, x, p, training) == res + F.dropout(x, p, training)      (the residual add)
    relu_dropout(x, p, training)     == F.dropout(F.relu(x), p, training)    (the feed-forward)

Why: on the CPU ``F.dropout`` draws its mask with ``bernoulli_`` on a float32 tensor, one
generator call per element, and multiplies by a float32 mask it keeps for the backward (~22 % of
a Transformer update at d 256, docs/results/race.md). Here a mask element is 16 random bits:
one call of torch's generator (``random_`` over the full 64-bit range) gives four, and an
element is dropped when its 16 bits, as a signed integer, fall below −32768 + round(p · 65536),
so P(drop) = round(p · 65536) / 65536, within 2⁻¹⁷ (7.6e-6) of p. The bits come from torch's
default CPU generator, so ``torch.manual_seed`` (``train.seed``) makes the masks reproducible.
The mask is kept as one byte per element (bool) and applied in place to the scaled copy (two
passes over the tensor, not three); the scale is folded into the residual add where there is one.

Elsewhere (CUDA, whose fused dropout kernel is fast; not training; p = 0) the functions are
the definitions themselves.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# the definition these functions compute
IMPLEMENTS = ("torch.nn.functional.dropout",)

_LEVELS = 1 << 16


def _fast(x: torch.Tensor, p: float, training: bool) -> bool:
    return training and 0.0 < p < 1.0 and x.device.type == "cpu" and x.is_floating_point()


def drop_mask(shape: torch.Size | tuple[int, ...], p: float, device: torch.device | str = "cpu") -> torch.Tensor:
    """A bool tensor of ``shape``, True (drop) with probability round(p · 65536) / 65536,
    independently per element, from torch's default generator."""
    n = 1
    for s in shape:
        n *= int(s)
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(1 << 63), None)
    bits = words.view(torch.int16)[:n].view(shape)
    return bits < (round(p * _LEVELS) - _LEVELS // 2)


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p):
        drop = drop_mask(x.shape, p, x.device)
        scale = 1.0 / (1.0 - p)
        ctx.save_for_backward(drop)
        ctx.scale = scale
        return x.mul(scale).masked_fill_(drop, 0)

    @staticmethod
    def backward(ctx, grad):
        (drop,) = ctx.saved_tensors
        return grad.mul(ctx.scale).masked_fill_(drop, 0), None


class _DropoutAdd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, res, x, p):
        drop = drop_mask(x.shape, p, x.device)
        scale = 1.0 / (1.0 - p)
        ctx.save_for_backward(drop)
        ctx.scale = scale
        return torch.add(res, x.masked_fill(drop, 0), alpha=scale)

    @staticmethod
    def backward(ctx, grad):
        (drop,) = ctx.saved_tensors
        d_x = grad.mul(ctx.scale).masked_fill_(drop, 0) if ctx.needs_input_grad[1] else None
        return (grad if ctx.needs_input_grad[0] else None), d_x, None


class _ReluDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p):
        # off: zero in the output and no gradient (relu's gradient at 0 is 0, as torch's)
        off = drop_mask(x.shape, p, x.device).logical_or_(x <= 0)
        scale = 1.0 / (1.0 - p)
        ctx.save_for_backward(off)
        ctx.scale = scale
        return x.mul(scale).masked_fill_(off, 0)

    @staticmethod
    def backward(ctx, grad):
        (off,) = ctx.saved_tensors
        return grad.mul(ctx.scale).masked_fill_(off, 0), None


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """F.dropout(x, p, training)."""
    if not _fast(x, p, training):
        return F.dropout(x, p, training)
    return _Dropout.apply(x, float(p))


def dropout_add(res: torch.Tensor, x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """res + F.dropout(x, p, training), for res of x's shape."""
    if not _fast(x, p, training) or res.shape != x.shape or res.dtype != x.dtype:
        return res + F.dropout(x, p, training)
    return _DropoutAdd.apply(res, x, float(p))


def relu_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """F.dropout(F.relu(x), p, training)."""
    if not _fast(x, p, training):
        return F.dropout(F.relu(x), p, training)
    return _ReluDropout.apply(x, float(p))

