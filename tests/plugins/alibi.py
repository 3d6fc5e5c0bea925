"""A Transformer attention variant from outside the package, in one file: ALiBi-style distance
biases (Press et al. 2022), a test-only plug-in (``attnmt --user-dir tests/plugins``; conftest.py
imports this folder alike). ARCHITECTURE.md, "Adding things", points here.

    B_hij = −m_h · min(|i − j|, D)      m_h = 2^(−b·h/H), h = 1..H      softmax(QKᵀ/√d + B) V

Its options are its own, ``model.alibi: {slope_base: b, max_distance: D}`` (D = 0: no cap).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnmt import attention
from attnmt.attention.variant import Variant


@dataclass
class AlibiOptions:
    slope_base: float = 8.0  # b: the paper's 8 (slopes 2^-1 .. 2^-8 over 8 heads)
    max_distance: int = 0  # D: farther keys get the bias of D; 0 = no cap

    def check(self, fail) -> None:
        if not self.slope_base > 0:
            fail("slope_base", f"must be > 0, got {self.slope_base}")
        if self.max_distance < 0:
            fail("max_distance", f"must be >= 0, got {self.max_distance}")


class Alibi(Variant):
    names = ("alibi",)
    Options = AlibiOptions
    reads_query_positions = True  # the bias depends on i (a search reads no block of beam rows)

    def bias(self, attn, q, n_keys, allowed, q_pos, ctx):
        """B (1, H, T, S) from the queries' positions i = q_pos (T,) and the keys' j = 0..S−1."""
        h = torch.arange(1, attn.heads + 1, device=q.device, dtype=q.dtype)
        slopes = torch.exp2(-self.options.slope_base * h / attn.heads)  # m_h
        distance = (q_pos[:, None] - torch.arange(n_keys, device=q.device)[None, :]).abs()
        if self.options.max_distance:
            distance = distance.clamp(max=self.options.max_distance)
        return -slopes[None, :, None, None] * distance.to(q.dtype)


attention.register(Alibi)
