"""Products of query rows with windows of a memory, for local attention's training path.

A window is 2D+1 rows of a memory table (N, d) given by index rows (M, 2D+1). ``WindowDot``
(scores x_mᵀ h̄_s) and ``WindowSum`` (contexts Σ a_m(s) h̄_s) are autograd functions that gather
the window rows in bounded chunks (``CHUNK_ELEMENTS``), and again in backward, instead of keeping an
(M, 2D+1, d) copy of the windows: training memory stays O(M·(D + d)) on top of the table.
In a loop of steps (attention_steps.local_steps) the table's gradient, and with ``StepLinear`` the
query products' weight gradients, are formed once for all steps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

# the definitions this module computes faster: LocalAttention's window products, autograd on
IMPLEMENTS = ("attnmt.attention.local_attention.LocalAttention",)

# temporary gathered window elements (rows × (2D+1) × d) per chunk with autograd: 4 MB in float32
CHUNK_ELEMENTS = 1 << 20


def gather_windows(table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """table (N, d), rows (M, W) -> the window rows (M, W, d), materialised."""
    return table.index_select(0, rows.reshape(-1)).view(*rows.shape, table.size(-1))


def _chunk(rows: torch.Tensor, d: int) -> int:
    return max(1, CHUNK_ELEMENTS // max(1, rows.size(1) * d))


def window_dot(x: torch.Tensor, table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """out[m, w] = x[m] · table[rows[m, w]]: x (M, d), table (N, d), rows (M, W) -> (M, W)."""
    step = _chunk(rows, table.size(1))
    # (M, W, d) @ (M, d, 1): the windows are the only temporary (a multiply-and-sum would
    # allocate their product too)
    parts = [
        torch.bmm(gather_windows(table, rows[i : i + step]), x[i : i + step].unsqueeze(-1))
        .squeeze(-1)
        for i in range(0, rows.size(0), step)
    ]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def window_sum(a: torch.Tensor, table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """out[m] = Σ_w a[m, w] table[rows[m, w]]: a (M, W) -> (M, d), without gathering the rows."""
    return F.embedding_bag(rows, table, per_sample_weights=a.to(table.dtype), mode="sum")


def window_scatter(a: torch.Tensor, x: torch.Tensor, rows: torch.Tensor, N: int) -> torch.Tensor:
    """The transpose of both: out[n] = Σ_{m, w: rows[m, w] = n} a[m, w] x[m] -> (N, d)."""
    out = x.new_zeros(N, x.size(1))
    step = _chunk(rows, x.size(1))
    for i in range(0, rows.size(0), step):
        outer = a[i : i + step].unsqueeze(-1).to(x.dtype) * x[i : i + step].unsqueeze(1)
        out.index_add_(0, rows[i : i + step].reshape(-1), outer.reshape(-1, x.size(1)))
    return out


def _table_grad(ctx, weights, x, rows, N):
    """The table's gradient window_scatter(weights, x, rows, N), or with ``ctx.steps`` (a list
    shared by the steps of a loop, and whether this is its first step) the steps' pieces: a
    later step leaves its piece and returns None, the first step (whose backward runs last, see
    attention_steps.local_steps) scatters them all at once, into one (N, d) tensor instead of one
    per step that autograd then adds up."""
    if ctx.steps is None:
        return window_scatter(weights, x, rows, N)
    pieces, first = ctx.steps
    pieces.append((weights, x, rows))
    if not first:
        return None
    weights, x, rows = (torch.cat(part) for part in zip(*pieces))
    pieces.clear()
    return window_scatter(weights, x, rows, N)


class WindowDot(torch.autograd.Function):
    """window_dot with a backward that re-gathers the windows instead of saving them.
    ``steps``: see _table_grad."""

    @staticmethod
    def forward(ctx, x, table, rows, steps=None):
        ctx.save_for_backward(x, table, rows)  # x is small, table is the memory itself
        ctx.steps = steps
        return window_dot(x, table, rows)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, table, rows = ctx.saved_tensors
        need_x, need_table = ctx.needs_input_grad[:2]
        grad_x = window_sum(grad, table, rows).to(x.dtype) if need_x else None
        grad_table = _table_grad(ctx, grad, x, rows, table.size(0)) if need_table else None
        return grad_x, grad_table, None, None


class WindowSum(torch.autograd.Function):
    """window_sum with a backward that re-gathers the windows instead of saving them.
    ``steps``: see _table_grad."""

    @staticmethod
    def forward(ctx, a, table, rows, steps=None):
        ctx.save_for_backward(a, table, rows)
        ctx.steps = steps
        return window_sum(a, table, rows)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        a, table, rows = ctx.saved_tensors
        need_a, need_table = ctx.needs_input_grad[:2]
        grad_a = window_dot(grad.to(table.dtype), table, rows).to(a.dtype) if need_a else None
        grad_table = _table_grad(ctx, a, grad, rows, table.size(0)) if need_table else None
        return grad_a, grad_table, None, None


class StepLinear(torch.autograd.Function):
    """y = x Wᵀ for one step of a loop over the same weight W (local attention's W_p h_t and,
    for `general`, W_aᵀ h_t, stacked), whose weight gradient Σ_t ∂L/∂y_tᵀ x_t is one product
    over all steps: ``steps`` = (a list shared by the loop's steps, whether this is its first
    step), as in _table_grad; autograd would write and add a rank-B gradient per step."""

    @staticmethod
    def forward(ctx, x, weight, steps):
        ctx.save_for_backward(x, weight)
        ctx.steps = steps
        return F.linear(x, weight)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad_x = grad @ weight if ctx.needs_input_grad[0] else None
        pieces, first = ctx.steps
        pieces.append((grad, x))
        if not first:
            return grad_x, None, None
        grads, xs = (torch.cat(part) for part in zip(*pieces))
        pieces.clear()
        return grad_x, grads.t() @ xs, None
