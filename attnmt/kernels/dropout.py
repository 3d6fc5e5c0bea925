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
The mask is kept as one byte per element and applied by multiplying with its bytes (1 keep,
0 drop) as uint8: on the CPU ``masked_fill_`` and ``where`` with a random mask run 5-17x slower
than that product (a 2-million-element feed-forward layer: 4.8 ms against 0.9 ms, 2 threads, AMD
EPYC; they branch per element), and were a tenth of a Transformer update. The scale is folded
into the residual add (``addcmul``) where there is one.

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


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, device: torch.device | str = "cpu") -> torch.Tensor:
    """A uint8 tensor of ``shape``: 0 (drop) with probability round(p · 65536) / 65536, else 1,
    independently per element, from torch's default generator."""
    n = 1
    for s in shape:
        n *= int(s)
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(1 << 63), None)
    bits = words.view(torch.int16)[:n].view(shape)
    return (bits >= (round(p * _LEVELS) - _LEVELS // 2)).view(torch.uint8)


def drop_mask(shape: torch.Size | tuple[int, ...], p: float, device: torch.device | str = "cpu") -> torch.Tensor:
    """The dropped elements of ``keep_mask`` (the same draw), as a bool tensor."""
    return keep_mask(shape, p, device) == 0


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p):
        keep = keep_mask(x.shape, p, x.device)
        ctx.save_for_backward(keep)
        ctx.scale = 1.0 / (1.0 - p)
        return x.mul(keep).mul_(ctx.scale)

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        return grad.mul(keep).mul_(ctx.scale), None


class _DropoutAdd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, res, x, p):
        keep = keep_mask(x.shape, p, x.device)
        ctx.save_for_backward(keep)
        ctx.scale = 1.0 / (1.0 - p)
        return torch.addcmul(res, x, keep, value=ctx.scale)

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        d_x = grad.mul(keep).mul_(ctx.scale) if ctx.needs_input_grad[1] else None
        return (grad if ctx.needs_input_grad[0] else None), d_x, None


class _ReluDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p):
        # on: kept and positive; elsewhere zero in the output and no gradient (relu's gradient
        # at 0 is 0, as torch's); relu first, so that −inf gives 0 as the definition does
        on = keep_mask(x.shape, p, x.device).view(torch.bool).logical_and_(x > 0).view(torch.uint8)
        ctx.save_for_backward(on)
        ctx.scale = 1.0 / (1.0 - p)
        return torch.relu(x).mul_(on).mul_(ctx.scale)

    @staticmethod
    def backward(ctx, grad):
        (on,) = ctx.saved_tensors
        return grad.mul(on).mul_(ctx.scale), None


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

