"""Training's bfloat16 products with their rows rounded up to a multiple of ``ROWS``.

Definition (``torch.nn.functional.linear`` without its bias, as ``packed.product`` takes it under
``bf16_products``): y = x̂ Ŵᵀ, x̂ and Ŵ the bfloat16 roundings of x (…, K) and W (N, K), y rounded
to bfloat16; the gradients d x = ĝ Ŵ and d W = ĝᵀ x̂ of the rounded gradient ĝ.

Why: oneDNN's bfloat16 matmul (AMX, AVX-512 BF16) compiles a kernel for every new shape of a
product (1–4 ms at a Transformer's sizes) and keeps the last 1,024. A training batch of ~2,000
tokens gives the products of its linear maps a row count (B · T) that is new at almost every
update, so every update compiled ~18 of them: 75 ms of a 0.62 s update at d 256 (race batches, one
thread, ``ONEDNN_VERBOSE=profile_create``). Here x̂ is written into a buffer whose row count is
rounded up to a multiple of ``ROWS`` (zeros below), as is ĝ in the backward: a product's shape then
repeats across updates and its kernel is compiled once. The zero rows add nothing to d W and are
cut from y and d x; the extra work is under ``ROWS`` rows per product (~1.7 % of ~2,000 on average).
The roundings are written where ``product`` made them anyway (x̂, Ŵ, ĝ): no extra copy but
the zero rows.
"""

from __future__ import annotations

import torch

IMPLEMENTS = ("torch.nn.functional.linear",)
KERNELS = ()  # a helper of packed.product / packed.products and fused_loss, not a model part

ROWS = 64  # rows rounded up to a multiple of this


def low_rows(x: torch.Tensor) -> torch.Tensor:
    """x (…, K) as a bfloat16 (M', K) block: its M rows, then zero rows up to M' = the next
    multiple of ROWS."""
    k = x.size(-1)
    m = x.numel() // k
    out = torch.empty(-(-m // ROWS) * ROWS, k, dtype=torch.bfloat16, device=x.device)
    out[:m].view(x.shape).copy_(x)
    out[m:].zero_()
    return out


class RoundedProduct(torch.autograd.Function):
    """x Wᵀ of bfloat16 roundings, rows padded (module docstring). Returns the first ``split``
    output columns in float32 and the others in bfloat16 (a view of the product): the float32
    ones for the caller's float32 path, the bfloat16 ones for results that only feed other
    bfloat16 products (``packed.products``' ``low`` maps)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, split: int):
        k, n = x.size(-1), weight.size(0)
        m = x.numel() // k
        x_low, w_low = low_rows(x), weight.to(torch.bfloat16)
        y = torch.mm(x_low, w_low.t())  # (M', N) bfloat16
        lead = x.shape[:-1]
        high = y[:m, :split].float().view(*lead, split)
        low = y[:m, split:].view(*lead, n - split)
        ctx.save_for_backward(x_low, w_low)
        ctx.rows, ctx.split, ctx.shape = m, split, x.shape
        return high, low

    @staticmethod
    def backward(ctx, d_high: torch.Tensor | None, d_low: torch.Tensor | None):
        x_low, w_low = ctx.saved_tensors
        m, split = ctx.rows, ctx.split
        g = torch.empty(x_low.size(0), w_low.size(0), dtype=torch.bfloat16, device=x_low.device)
        for block, grad in ((g[:m, :split], d_high), (g[:m, split:], d_low)):
            if block.numel():
                block.copy_(grad.reshape(m, -1)) if grad is not None else block.zero_()
        g[m:].zero_()
        d_x = torch.mm(g, w_low)[:m].float().view(ctx.shape) if ctx.needs_input_grad[0] else None
        d_w = torch.mm(g.t(), x_low).float() if ctx.needs_input_grad[1] else None
        return d_x, d_w, None


def rounded_product(x: torch.Tensor, weight: torch.Tensor, split: int | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """(float32 x Wᵀ of the first ``split`` output columns (all by default), bfloat16 of the
    rest), products of bfloat16 roundings with autograd (``RoundedProduct``)."""
    return RoundedProduct.apply(x, weight, weight.size(0) if split is None else split)
