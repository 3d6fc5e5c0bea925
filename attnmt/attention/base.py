"""The attention interface every RNN-decoder attention module implements.

A decoder calls, once per source batch::

    memory = attention.prepare(values, mask)          # values h̄_s: (B, S, d), mask: (B, S) bool

and then, for a block of T target steps (T = all steps when teacher forcing without input
feeding, T = 1 in a step-by-step loop)::

    context, weights = attention(query, memory, positions, need_weights)
        # query h_t: (B, T, d); positions: (T,) absolute target indices t (used by local-m)
        # context c_t: (B, T, d); weights a_t: (B, T, S) dense, or None when not needed

``prepare`` is where score-specific work that depends only on the source is done once (for
`general`, W_a h̄_s; for `concat`, the source half of W_a[h_t; h̄_s]); beam search re-indexes a
``Memory`` with ``memory.select(index)``. A new attention type is a module with these two methods.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass
class Memory:
    """Encoder states prepared for attention. Every tensor has the batch on dimension 0."""

    values: torch.Tensor  # h̄_s: (B, S, d)
    keys: torch.Tensor  # score-specific projection of h̄_s: (B, S, d_k)
    mask: torch.Tensor  # (B, S) bool, True on real source tokens
    lengths: torch.Tensor  # (B,) long, number of real source tokens

    def select(self, index: torch.Tensor) -> "Memory":
        """The memory of batch rows ``index`` (e.g. repeated per beam hypothesis)."""
        return Memory(**{f.name: getattr(self, f.name).index_select(0, index) for f in fields(self)})


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax over the last dim of scores (B, T, S), with positions where mask (B, S) is False
    receiving exactly zero weight."""
    scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
    return torch.softmax(scores, dim=-1)
