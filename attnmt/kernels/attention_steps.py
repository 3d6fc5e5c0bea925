"""Attention's kernels in the decoder's step loops: global and local attention's per-step
functions for training (the memory's gradient formed once for all steps) and global attention's
search step (the mask as an additive bias, taken once per memory).

``steps_for(attention, memory)`` is the decoder's one entry: the kernel of ``KERNELS`` that
supports the attention (``dispatch.choose``), or None (the decoder then calls the attention
module itself at every step: the reference path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from attnmt.kernels.dispatch import Kernel, choose

# attnmt.attention.base.Memory (kernels import no definitions)
Memory = Any

GLOBAL = "attnmt.attention.global_attention.GlobalAttention"
LOCAL = "attnmt.attention.local_attention.LocalAttention"
IMPLEMENTS = (GLOBAL, LOCAL)


def _dot_score(att: nn.Module) -> tuple[bool, str]:
    """Whether the attention's score is one product with the memory (asked of the score: ``dot``)."""
    score = att.score
    return (True, "") if score.dot else (False, f"score {score.name}: not a dot product with the memory")


def steps_for(att: nn.Module, memory: Memory) -> Callable | None:
    """``attend(query, positions, need_weights)`` over ``memory`` from the attention's steps
    kernel, or None where no kernel supports it."""
    kernel, _ = choose("attention steps", att)
    return kernel.run(att, memory) if kernel is not None else None


def global_decode(
    att: nn.Module, query: torch.Tensor, memory: Memory
) -> tuple[torch.Tensor, torch.Tensor]:
    """``GlobalAttention.forward`` without autograd for a dot or general score: eq. 7 as
    softmax(q Kᵀ + b) with the mask as an additive bias b (0 or −inf, ``dot_scores``), taken once per memory,
    so a search step is three ops (scores with the mask, softmax, context) rather than
    rebuilding the mask from the boolean one at every step."""
    keys_t, bias = memory.cached(
        "global-scores", lambda m: (m.keys.transpose(1, 2), att.dot_scores(m)[1]))
    R, T, d = query.shape
    E = R // memory.rows  # query rows r·k .. r·k+k−1 read entry r
    rows = query.reshape(E, memory.rows * T, d)
    if rows.dtype == bias.dtype and not torch.is_autocast_enabled(query.device.type):
        scores = torch.baddbmm(bias, rows, keys_t)  # (E, k·T, S)
    else:
        scores = (rows @ keys_t).float() + bias
    weights = torch.softmax(scores, dim=-1)
    context = weights.to(memory.values.dtype) @ memory.values  # c_t: (E, k·T, d)
    return context.view(R, T, -1), weights.view(R, T, -1)


def global_steps(att: nn.Module, memory: Memory) -> Callable:
    """``attend(query, positions, need_weights)``, equal to ``att(query, memory, positions,
    need_weights)``, for a loop of one-step queries (B, 1, d) over the same memory, each step's
    query depending on the previous step's output (the input-feeding decoder).

    With autograd on and a dot/general score, the memory's gradient is formed once for all
    T steps instead of per step: ∂L/∂h̄ = Σ_t ∂L/∂score_tᵀ q_t (and likewise for the values)
    is one (S × T)·(T × d) product per sentence. Per step it would be a rank-1 product written
    and added into a (B, S, d) tensor T times, which makes the backward pass of attention
    several times slower than its forward pass."""
    keys, values = memory.keys, memory.values
    if (
        not att.score.dot
        or not torch.is_grad_enabled()
        or not (keys.requires_grad or values.requires_grad)
    ):
        return lambda query, positions=None, need_weights=True: att(
            query, memory, positions, need_weights
        )
    saved: list[tuple[torch.Tensor, ...]] = []
    calls = [0]

    def attend(query, positions=None, need_weights=True):
        calls[0] += 1
        return _StepAttention.apply(query, keys, values, memory.mask, saved, calls[0] == 1)

    return attend


class _StepAttention(torch.autograd.Function):
    """One step of dot/general attention, c_t = softmax(q_t Kᵀ) V, whose backward returns the
    memory gradient only at the first step, summed over all steps.

    Every later step's query depends on this step's output, so autograd runs this step's
    backward last; the later steps leave (q_t, ∂L/∂score_t, a_t, ∂L/∂c_t) in ``saved``."""

    @staticmethod
    def forward(ctx, query, keys, values, mask, saved, first):
        scores = (query @ keys.transpose(1, 2)).masked_fill(~mask.unsqueeze(1), float("-inf"))
        weights = torch.softmax(scores, dim=-1)  # (B, 1, S): attention.base.masked_softmax
        context = weights @ values  # (B, 1, d)
        ctx.save_for_backward(query, keys, values, weights)
        ctx.saved, ctx.first = saved, first
        return context, weights

    @staticmethod
    @once_differentiable
    def backward(ctx, d_context, d_weights):
        query, keys, values, weights = ctx.saved_tensors
        d_a = d_context @ values.transpose(1, 2) + d_weights  # ∂L/∂a_t: (B, 1, S)
        d_scores = weights * (d_a - (d_a * weights).sum(-1, keepdim=True))  # softmax backward
        d_query = d_scores @ keys  # (B, 1, d)
        ctx.saved.append((query, d_scores, weights, d_context))
        if not ctx.first:
            return d_query, None, None, None, None, None
        q, d_s, a, d_c = (torch.cat(parts, dim=1) for parts in zip(*ctx.saved))  # (B, T, ·)
        ctx.saved.clear()
        d_keys = d_s.transpose(1, 2) @ q  # Σ_t ∂L/∂score_tᵀ q_t: (B, S, d)
        d_values = a.transpose(1, 2) @ d_c  # Σ_t a_tᵀ ∂L/∂c_t: (B, S, d)
        return d_query, d_keys, d_values, None, None, None



def local_steps(att: nn.Module, memory: Memory) -> Callable:
    """``attend(query, positions, need_weights)``, equal to ``att(query, memory, positions,
    need_weights)``, for a loop of one-step queries (B, 1, d) over the same memory, each step's
    query depending on the previous step's output (the input-feeding decoder).

    With autograd on and a dot/general score, the memory's gradient is formed once for all
    steps: each step's backward leaves its windows' pieces (window_products._table_grad) and
    the first step's, which runs last (every later step depends on its output), scatters
    them all into one (E·S, d) tensor. Per step it would be a zeroed (E·S, d) tensor per
    product, written and added up by autograd T times."""
    if not (att.score_is_dot and torch.is_grad_enabled()
            and (memory.keys.requires_grad or memory.values.requires_grad)):
        return lambda query, positions=None, need_weights=True: att(
            query, memory, positions, need_weights)
    pieces: dict[str, list] = {"scores": [], "context": [], "projection": []}
    # the per-step d × d products of the query, W_aᵀ h_t (general) and W_p h_t (local-p),
    # stacked into one StepLinear whose weight gradient is also formed once
    stacked = att._query_weights(memory.keys is not memory.values)
    stacked = torch.cat(stacked) if stacked else None
    calls = [0]

    def attend(query, positions=None, need_weights=True):
        calls[0] += 1
        first = calls[0] == 1
        steps = {k: (v, first) for k, v in pieces.items()}
        steps["stacked"] = stacked
        return att._train(query, memory, positions, need_weights, steps)

    return attend


KERNELS = (
    Kernel("attention_steps.global_steps", "attention steps", GLOBAL, "score dot or general",
           _dot_score, ("cpu", "cuda"), global_steps),
    Kernel("attention_steps.local_steps", "attention steps", LOCAL, "score dot or general",
           _dot_score, ("cpu", "cuda"), local_steps),
    Kernel("attention_steps.global_decode", "attention search", GLOBAL, "score dot or general",
           _dot_score, ("cpu", "cuda"), global_decode),
)
