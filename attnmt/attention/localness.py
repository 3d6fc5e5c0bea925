"""Gaussian localness modelling (Yang et al. 2018), a baseline for window attention.

Each query predicts a centre P_i and a window size D_i over the I keys it may see:

    [p_i, z_i] = [u_pᵀ; u_dᵀ] tanh(W_p q_i)          (per head; W_p shared by the heads)
    P_i = (I − 1) · sigmoid(p_i)     D_i = I · sigmoid(z_i)     σ_i = D_i / 2
    G_ij = −(j − P_i)² / (2 σ_i²)    added to the scores:  softmax(QKᵀ/√d + G)

I is the number of real keys (source length in cross-attention, i + 1 in decoder self-attention,
so incremental decoding sees the same bias as teacher forcing). We keep P inside [0, I − 1] rather
than [0, I] (positions are 0-based) and floor σ at 0.5 so a collapsed window cannot produce
overflowing biases.
"""

from __future__ import annotations

import torch
from torch import nn

from attnmt.attention.variant import Variant, register


class GaussianLocalness(nn.Module):
    def __init__(self, heads: int, head_dim: int):
        super().__init__()
        self.proj = nn.Linear(head_dim, head_dim)  # W_p
        self.centre = nn.Parameter(torch.randn(heads, head_dim) * head_dim**-0.5)  # u_p per head
        self.width = nn.Parameter(torch.randn(heads, head_dim) * head_dim**-0.5)  # u_d per head

    def centre_and_sigma(self, q: torch.Tensor, visible: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q (B, H, T, d), visible I (B, 1, T, 1) float -> P_i, σ_i (B, H, T, 1)."""
        h = torch.tanh(self.proj(q))
        p = torch.einsum("bhtd,hd->bht", h, self.centre).unsqueeze(-1)
        z = torch.einsum("bhtd,hd->bht", h, self.width).unsqueeze(-1)
        centre = (visible - 1.0) * torch.sigmoid(p)
        sigma = (visible * torch.sigmoid(z) / 2.0).clamp_min(0.5)
        return centre, sigma

    def bias(self, q: torch.Tensor, visible: torch.Tensor, n_keys: int) -> torch.Tensor:
        """G_ij = −(j − P_i)² / (2σ_i²): q (B, H, T, d), visible (B, 1, T, 1) -> (B, H, T, S)."""
        centre, sigma = self.centre_and_sigma(q, visible)
        j = torch.arange(n_keys, device=q.device, dtype=q.dtype)
        return -((j - centre) ** 2) / (2.0 * sigma**2)


class Localness(Variant):
    """The variant: the scores gain G (parameters: attn.localness)."""

    names = ("localness",)

    def build(self, attn) -> None:
        attn.localness = GaussianLocalness(attn.heads, attn.head_dim)

    def bias(self, attn, q, n_keys, allowed, q_pos, ctx):
        B, _, T, _ = q.shape
        visible = allowed.expand(B, 1, T, n_keys).sum(-1, keepdim=True).to(q.dtype)  # I
        return attn.localness.bias(q, visible, n_keys)


register(Localness)
