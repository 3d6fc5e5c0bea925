"""Standard attention with dropout on its weights, for training on the CPU.

Definition (``attnmt.attention.variant.Variant``, standard attention, as
``MultiHeadAttention.forward`` computes it with dropout p):

    A   = softmax(masked(Q Kᵀ · s))        masked: −inf where a key is not allowed
    out = dropout(A, p) V

SDPA's CPU kernels take no dropout (with dropout_p > 0 it runs its math path and draws the mask
with ``bernoulli_``), so training with dropout runs these steps. Here the key mask becomes an
additive bias of 0 / −inf once per call ((B|1, 1, T|1, S), far smaller than the scores) and the
scale and the bias join in one pass, ``bias + s · (Q Kᵀ)`` (``torch.add`` with ``alpha``; equal
to masked_fill of the scaled scores: x + 0 = x, x + −inf = −inf), where the definition's steps
scale, negate the mask and fill (a clone and a fill, and the fill again in the backward). The
weights' dropout is ``kernels/dropout.dropout``; the two products are ``packed.matmul`` (bfloat16
operands under ``train.amp``, as the linear maps).

``context`` is standard attention's path without weights (``MultiHeadAttention.forward`` takes it
through ``dispatch.choose``): torch's SDPA, or these steps where it would run its math path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnmt.kernels.dispatch import Kernel
from attnmt.kernels.dropout import dropout
from attnmt.kernels.packed import matmul

IMPLEMENTS = ("attnmt.attention.variant.Variant",)


def mask_bias(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool key mask (True: may be seen) as an additive bias of its shape: 0 where allowed,
    −inf elsewhere (adding it is masked_fill of the −inf, and on the CPU far cheaper than a fill
    through a broadcast mask)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, float("-inf"))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None,
              scale: float, p: float, training: bool = True) -> torch.Tensor:
    """dropout(softmax(QKᵀ·scale masked by ``allowed``), p) V. q (B, H, T, d), k and v (B, H, S,
    d), allowed bool broadcastable to (B, H, T, S), True where a key may be seen (None: all)."""
    scores = matmul(q, k.transpose(-1, -2))
    if allowed is not None:
        scores = torch.add(mask_bias(allowed, scores.dtype), scores, alpha=scale)
    else:
        scores = scores * scale
    return matmul(dropout(torch.softmax(scores, dim=-1), p, training), v)


def context(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None,
            scale: float, p: float) -> torch.Tensor:
    """Standard attention's context A V (B, H, T, d) without its weights: SDPA (its default scale
    is ``scale``, 1/√d), or with dropout on the CPU ``attention`` (SDPA's CPU kernels take no
    dropout: with dropout_p > 0 it runs its math path, whose float32 bernoulli_ mask costs more
    than these steps)."""
    if p > 0 and q.device.type == "cpu":
        return attention(q, k, v, allowed, scale, p)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p)


KERNELS = (Kernel("attention_dropout.context", "multi-head attention", IMPLEMENTS[0],
                  "standard attention without its weights: SDPA (with dropout on the CPU, these steps)",
                  lambda unit: (True, ""), ("cpu", "cuda"), context),)
