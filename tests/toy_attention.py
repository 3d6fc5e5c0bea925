"""A new RNN attention in one file: a scaled cosine score (a test-only toy), registered as
``model.attention: cosine``. ARCHITECTURE.md, "Adding things", points here.

    score(h_t, h̄_s) = g · cos(h_t, h̄_s) = g · h_tᵀ h̄_s / (‖h_t‖ ‖h̄_s‖)     (g a learned scale)
    a_t = softmax_s(score),   c_t = Σ_s a_t(s) h̄_s
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnmt import attention
from attnmt.attention.base import Memory, masked_softmax


class ToyCosine(nn.Module):
    def __init__(self, cfg, query_dim: int, memory_dim: int):
        super().__init__()
        if query_dim != memory_dim:
            raise ValueError("the cosine score needs equal query and memory sizes")
        self.scale = nn.Parameter(torch.tensor(5.0))  # g: a cosine alone is too flat a softmax

    def prepare(self, values: torch.Tensor, mask: torch.Tensor) -> Memory:
        """Keys h̄_s / ‖h̄_s‖, once per sentence: (B, S, d)."""
        return Memory(values=values, keys=F.normalize(values, dim=-1), mask=mask, lengths=mask.sum(1))

    def forward(self, query: torch.Tensor, memory: Memory, positions: torch.Tensor | None = None,
                need_weights: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """query h_t (B, T, d) -> c_t (B, T, d), a_t (B, T, S)."""
        scores = self.scale * (F.normalize(query, dim=-1) @ memory.keys.transpose(1, 2))
        weights = masked_softmax(scores, memory.mask)
        return weights @ memory.values, weights


attention.register("cosine", ToyCosine)
