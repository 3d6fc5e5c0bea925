"""The output layer and its cross-entropy as one function with a hand-written backward.

    logits = x Wᵀ + b                                   (N, V)
    loss   = Σ_n (1 − ε)·(lse_n − logits_n,y) + ε·(lse_n − mean_v logits_n,v)      (ε: label smoothing)
    ∂loss/∂logits = softmax(logits) − (1 − ε)·onehot(y) − ε/V

Autograd builds this from linear → log_softmax → nll_loss and makes several passes over (N, V)
tensors (a log-softmax copy, a zero-filled one-hot gradient, the softmax backward). Here the logits
buffer becomes the probabilities in place and then the gradient in place: one (N, V) buffer, a few
passes over it. Equal to F.cross_entropy(F.linear(x, W, b), y, reduction="sum",
label_smoothing=ε) up to float rounding (tests/test_fused_rnn.py).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from attnmt.kernels import packed
from attnmt.kernels.dispatch import Kernel
from attnmt.kernels.padded_rows import low_rows

# the definitions this module computes faster: the output layer's token cross-entropy
IMPLEMENTS = ("attnmt.models.common.token_loss",)


# (N, V) buffers of finished backward passes, for the next forward: a fresh tensor of this size
# (tens of MB) is mapped anew by the allocator on every call, and its page faults cost about a
# third of the product that fills it
_spare: list[torch.Tensor] = []


def _buffer(size: int, like: torch.Tensor) -> torch.Tensor:
    """A flat buffer of at least ``size`` elements: a spare one if it fits, else a new one."""
    for i, buf in enumerate(_spare):
        if buf.numel() >= size and buf.dtype == like.dtype and buf.device == like.device:
            return _spare.pop(i)
    return like.new_empty(size)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, target, smoothing):
        flat = _buffer(x.size(0) * weight.size(0), x)
        logits = flat[: x.size(0) * weight.size(0)].view(x.size(0), weight.size(0))  # (N, V)
        low = packed.bf16_enabled() and x.dtype == torch.float32 and x.device.type == "cpu"
        x_low = w_low = None
        if low:  # bf16 products: the operands rounded once, kept for the backward's products
            # rows padded so that oneDNN's compiled kernel repeats across updates (padded_rows.py)
            x_low, w_low = low_rows(x), weight.to(torch.bfloat16)
            logits.copy_(torch.mm(x_low, w_low.t())[: x.size(0)])
            if bias is not None:
                logits.add_(bias)
        elif bias is not None:
            torch.addmm(bias, x, weight.t(), out=logits)
        else:
            torch.mm(x, weight.t(), out=logits)
        target_logit = logits.gather(1, target.unsqueeze(1)).squeeze(1)
        mean_logit = logits.mean(dim=1) if smoothing > 0 else None
        top = logits.amax(dim=1, keepdim=True)
        # in the logits' buffer: exp(logit − max), then softmax. Below −80 the vectorised exp takes
        # a slow path (25x); exp(−80) ≈ 2e−35 is zero at float precision of the sum
        probs = logits.sub_(top).clamp_(min=-80.0).exp_()
        total = probs.sum(dim=1, keepdim=True)
        probs.div_(total)
        lse = (top + total.log()).squeeze(1)  # log Σ_v exp(logit_v)
        loss = lse - target_logit  # −log p(y)
        if smoothing > 0:
            loss = (1 - smoothing) * loss + smoothing * (lse - mean_logit)
        ctx.save_for_backward(x_low if low else x, w_low if low else weight, probs, target)
        ctx.smoothing, ctx.has_bias, ctx.spent, ctx.flat, ctx.low = smoothing, bias is not None, False, flat, low
        return loss.sum()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        if ctx.spent:
            raise RuntimeError("linear_cross_entropy: backward twice through the same graph")
        ctx.spent = True  # the probabilities' buffer becomes the gradient below
        x, weight, probs, target = ctx.saved_tensors
        eps = ctx.smoothing
        d_logits = probs
        d_logits.scatter_add_(1, target.unsqueeze(1), probs.new_full((target.numel(), 1), -(1 - eps)))
        if eps > 0:
            d_logits.sub_(eps / probs.size(1))
        d_logits.mul_(grad)
        if ctx.low:  # x and W: the forward's rounded operands; the gradient rounded once
            d_low = low_rows(d_logits)  # x: the padded rounding, its rows past N zero
            d_x = torch.mm(d_low, weight)[: d_logits.size(0)].float()
            d_w = torch.mm(d_low.t(), x).float()
        else:
            d_x = d_logits @ weight
            d_w = d_logits.t() @ x
        d_b = d_logits.sum(0) if ctx.has_bias else None
        if ctx.flat.device.type == "cpu" and len(_spare) < 2:  # done with it: the next step's buffer
            _spare.append(ctx.flat)
        ctx.flat = None
        return d_x, d_w, d_b, None, None


def linear_cross_entropy(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, target: torch.Tensor,
    smoothing: float = 0.0,
) -> torch.Tensor:
    """Σ_n cross-entropy(x_n Wᵀ + b, y_n) with label smoothing ε. x (N, d), W (V, d), y (N,)."""
    return _LinearCrossEntropy.apply(x, weight, bias, target, float(smoothing))


KERNELS = tuple(Kernel("fused_loss.linear_cross_entropy", "loss", model,
                       "token_loss: the output layer and cross-entropy", lambda model: (True, ""),
                       ("cpu",), linear_cross_entropy)
                for model in ("attnmt.models.seq2seq.Seq2Seq", "attnmt.models.transformer.Transformer",
                              "attnmt.models.transformer.TransformerLM"))
