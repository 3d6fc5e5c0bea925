"""Relative position representations (Shaw et al. 2018), a baseline for window attention.

For query position i and key position j, learned vectors a^K_ij = w^K_{clip(j−i, k)} and
a^V_ij = w^V_{clip(j−i, k)} (clip(x, k) = max(−k, min(k, x)), shared by all heads) enter as

    e_ij = q_i (k_j + a^K_ij)ᵀ / √d          z_i = Σ_j α_ij (v_j + a^V_ij)

Only 2k+1 distinct vectors exist, so both terms are computed per *distance bucket* and gathered
(scores) or scattered (values): O(T·S) memory, never a (T, S, d) tensor.
Self-attention only: query and key positions must index the same sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attnmt.attention.variant import Variant, register
from attnmt.errors import key_error


@dataclass
class RelativeOptions:
    clip: int = 16  # k: distances beyond ±k share the vectors of ±k (model.relative_clip)


class RelativePositions(nn.Module):
    def __init__(self, clip: int, head_dim: int):
        super().__init__()
        self.clip = clip
        self.key = nn.Embedding(2 * clip + 1, head_dim)  # w^K_{−k..k}
        self.value = nn.Embedding(2 * clip + 1, head_dim)  # w^V_{−k..k}
        nn.init.normal_(self.key.weight, std=head_dim**-0.5)
        nn.init.normal_(self.value.weight, std=head_dim**-0.5)

    def buckets(self, q_positions: torch.Tensor, n_keys: int) -> torch.Tensor:
        """(T,) query positions -> (T, S) bucket index clip(j − i, k) + k."""
        j = torch.arange(n_keys, device=q_positions.device)
        return (j.unsqueeze(0) - q_positions.unsqueeze(1)).clamp(-self.clip, self.clip) + self.clip

    def score_bias(self, q: torch.Tensor, buckets: torch.Tensor) -> torch.Tensor:
        """q a^K_ijᵀ (unscaled): q (B, H, T, d), buckets (T, S) -> (B, H, T, S)."""
        per_bucket = q @ self.key.weight.t()  # (B, H, T, 2k+1)
        index = buckets.unsqueeze(0).unsqueeze(0).expand(q.size(0), q.size(1), -1, -1)
        return per_bucket.gather(-1, index)

    def value_term(self, attn: torch.Tensor, buckets: torch.Tensor) -> torch.Tensor:
        """Σ_j α_ij a^V_ij: attn (B, H, T, S) -> (B, H, T, d)."""
        B, H, T, _ = attn.shape
        index = buckets.unsqueeze(0).unsqueeze(0).expand(B, H, -1, -1)
        mass = attn.new_zeros(B, H, T, 2 * self.clip + 1).scatter_add_(-1, index, attn)
        return mass @ self.value.weight


class Relative(Variant):
    """The variant: e_ij gains q_i a^K_ijᵀ/√d, z_i gains Σ_j α_ij a^V_ij (parameters: attn.relative)."""

    names = ("relative",)
    self_only = True
    reads_query_positions = True

    def __init__(self, name: str = "relative", options: RelativeOptions | None = None):
        super().__init__(name, options or RelativeOptions())
        self.clip = self.options.clip

    @classmethod
    def options_from(cls, cfg, name: str) -> RelativeOptions:
        return RelativeOptions(cfg.relative_clip)  # the flat key saved runs hold

    @classmethod
    def check(cls, cfg, kind: str, fail=key_error) -> None:
        super().check(cfg, kind, fail)
        if cfg.relative_clip < 1:
            fail("model.relative_clip", f"must be at least 1, got {cfg.relative_clip}")

    def build(self, attn) -> None:
        attn.relative = RelativePositions(self.clip, attn.head_dim)

    def bias(self, attn, q, n_keys, allowed, q_pos, ctx):
        ctx["buckets"] = attn.relative.buckets(q_pos, n_keys)
        return attn.relative.score_bias(q, ctx["buckets"]) * attn.scale

    def values(self, attn, weights, ctx):
        return attn.relative.value_term(weights, ctx["buckets"])


register(Relative)
