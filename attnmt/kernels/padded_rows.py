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


def low_rows(x: torch.Tensor, multiple: int = ROWS) -> torch.Tensor:
    """x (…, K) as a bfloat16 (M', K) block: its M rows, then zero rows up to M' = the next
    multiple of ``multiple``."""
    k = x.size(-1)
    m = x.numel() // k
    out = torch.empty(-(-m // multiple) * multiple, k, dtype=torch.bfloat16, device=x.device)
    out[:m].view(x.shape).copy_(x)
    out[m:].zero_()
    return out


class RoundedProduct(torch.autograd.Function):
    """x Wᵀ of bfloat16 roundings, rows padded (module docstring), as pieces of its output
    columns (``sizes``): the first ``high`` pieces in float32 (the caller's float32 path), the
    others in bfloat16 (views of the product: results that only feed other bfloat16 products,
    ``packed.products``' ``low`` maps). Each piece's gradient is written straight into its
    columns of the backward's one bfloat16 block, whatever its layout (no concatenation)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, sizes: tuple[int, ...], high: int):
        m = x.numel() // x.size(-1)
        x_low, w_low = low_rows(x), weight.to(torch.bfloat16)
        y = torch.mm(x_low, w_low.t())[:m]  # (M, N) bfloat16 of the (M', N) product
        lead = x.shape[:-1]
        pieces = [piece.view(*lead, piece.size(1)) for piece in y.split(sizes, dim=1)]
        ctx.save_for_backward(x_low, w_low)
        ctx.rows, ctx.sizes, ctx.shape = m, sizes, x.shape
        return tuple(piece.float() if i < high else piece for i, piece in enumerate(pieces))

    @staticmethod
    def backward(ctx, *grads: torch.Tensor | None):
        x_low, w_low = ctx.saved_tensors
        m, lead = ctx.rows, ctx.shape[:-1]
        g = torch.empty(x_low.size(0), w_low.size(0), dtype=torch.bfloat16, device=x_low.device)
        for block, grad in zip(g[:m].split(ctx.sizes, dim=1), grads):
            if grad is None:  # a piece the loss does not reach
                block.zero_()
            else:
                block.view(*lead, block.size(1)).copy_(grad)
        g[m:].zero_()
        d_x = torch.mm(g, w_low)[:m].float().view(ctx.shape) if ctx.needs_input_grad[0] else None
        d_w = torch.mm(g.t(), x_low).float() if ctx.needs_input_grad[1] else None
        return d_x, d_w, None, None


def rounded_product(x: torch.Tensor, weight: torch.Tensor, sizes: list[int] | None = None,
                    high: int | None = None) -> tuple[torch.Tensor, ...]:
    """x Wᵀ of bfloat16 roundings with autograd (``RoundedProduct``), split into pieces of
    ``sizes`` output columns (default: one): the first ``high`` (default: all) in float32, the
    rest in bfloat16."""
    sizes = tuple(sizes) if sizes is not None else (weight.size(0),)
    return RoundedProduct.apply(x, weight, sizes, len(sizes) if high is None else high)
