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

import threading

import torch
from torch.autograd.function import once_differentiable

from attnmt.models.fused_rnn import row_blocks


# (N, V) buffers of finished backward passes, for the next forward: a fresh tensor of this size
# (tens of MB) is mapped anew by the allocator on every call, and its page faults cost about a
# third of the product that fills it
_spare: list[torch.Tensor] = []
_spare_lock = threading.Lock()  # row blocks take and return buffers from two threads


def _buffer(size: int, like: torch.Tensor) -> torch.Tensor:
    """A flat buffer of at least ``size`` elements: a spare one if it fits, else a new one."""
    with _spare_lock:
        for i, buf in enumerate(_spare):
            if buf.numel() >= size and buf.dtype == like.dtype and buf.device == like.device:
                return _spare.pop(i)
    return like.new_empty(size)


def _give_back(buf: torch.Tensor) -> None:
    with _spare_lock:
        _spare.append(buf)
        del _spare[: max(len(_spare) - 4, 0)]  # the newest few


class _LinearCrossEntropy(torch.autograd.Function):
    """Runs on blocks of rows, one CPU thread each (fused_rnn.row_blocks): two 1-thread products
    on half the rows each are ~15 % faster here than one 2-thread product on all of them."""

    @staticmethod
    def forward(ctx, x, weight, bias, target, smoothing):
        N, V = x.size(0), weight.size(0)
        losses = x.new_empty(N)
        blocks: dict[int, tuple[int, torch.Tensor, torch.Tensor]] = {}

        def run(lo: int, hi: int) -> None:
            flat = _buffer((hi - lo) * V, x)
            logits = flat[: (hi - lo) * V].view(hi - lo, V)  # (rows, V)
            if bias is not None:
                torch.addmm(bias, x[lo:hi], weight.t(), out=logits)
            else:
                torch.mm(x[lo:hi], weight.t(), out=logits)
            y = target[lo:hi]
            target_logit = logits.gather(1, y.unsqueeze(1)).squeeze(1)
            mean_logit = logits.mean(dim=1) if smoothing > 0 else None
            top = logits.amax(dim=1, keepdim=True)
            # in the logits' buffer: exp(logit − max), then softmax. Below −80 the vectorised exp
            # takes a slow path (25x); exp(−80) ≈ 2e−35 is zero at float precision of the sum
            probs = logits.sub_(top).clamp_(min=-80.0).exp_()
            total = probs.sum(dim=1, keepdim=True)
            probs.div_(total)
            lse = (top + total.log()).squeeze(1)  # log Σ_v exp(logit_v)
            loss = lse - target_logit  # −log p(y)
            if smoothing > 0:
                loss = (1 - smoothing) * loss + smoothing * (lse - mean_logit)
            losses[lo:hi] = loss
            blocks[lo] = (hi, probs, flat)

        row_blocks(N, run)
        ctx.save_for_backward(x, weight, target)
        ctx.smoothing, ctx.has_bias, ctx.blocks = smoothing, bias is not None, blocks
        return losses.sum()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        if ctx.blocks is None:
            raise RuntimeError("linear_cross_entropy: backward twice through the same graph")
        blocks, ctx.blocks = ctx.blocks, None  # the probabilities' buffers become the gradient below
        x, weight, target = ctx.saved_tensors
        eps = ctx.smoothing
        d_x = torch.empty_like(x)
        d_w = {lo: None for lo in blocks}
        d_b = {lo: None for lo in blocks}

        def run(lo: int, hi: int) -> None:
            end, d_logits, flat = blocks[lo]
            assert end == hi  # the forward's blocks
            y = target[lo:hi]
            d_logits.scatter_add_(1, y.unsqueeze(1), d_logits.new_full((hi - lo, 1), -(1 - eps)))
            if eps > 0:
                d_logits.sub_(eps / d_logits.size(1))
            d_logits.mul_(grad)
            torch.mm(d_logits, weight, out=d_x[lo:hi])
            d_w[lo] = d_logits.t() @ x[lo:hi]
            d_b[lo] = d_logits.sum(0) if ctx.has_bias else None
            if flat.device.type == "cpu":
                _give_back(flat)  # done with it: a buffer for the next forward

        row_blocks(x.size(0), run)
        parts = [d_w[lo] for lo in sorted(d_w)]
        d_weight = parts[0]
        for part in parts[1:]:
            d_weight.add_(part)
        d_bias = None if not ctx.has_bias else sum(d_b[lo] for lo in sorted(d_b))
        return d_x, d_weight, d_bias, None, None


def linear_cross_entropy(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, target: torch.Tensor,
    smoothing: float = 0.0,
) -> torch.Tensor:
    """Σ_n cross-entropy(x_n Wᵀ + b, y_n) with label smoothing ε. x (N, d), W (V, d), y (N,)."""
    return _LinearCrossEntropy.apply(x, weight, bias, target, float(smoothing))
