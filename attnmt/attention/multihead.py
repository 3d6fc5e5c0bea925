"""Multi-head attention (Vaswani et al. 2017) with the variants the Transformer models can select.

    standard         softmax(QKᵀ/√d) V
    relative         Shaw et al. 2018 relative position representations (self-attention only)
    localness        Yang et al. 2018 Gaussian bias −(j − P_i)²/(2σ_i²) added to the scores
    window-mul       Nguyen et al. 2020, softmax(QKᵀ/√d) ⊙ M                 (token-based mask)
    window-add       Nguyen et al. 2020, softmax(QKᵀ/√d + (Q_L K_Lᵀ/√d) ⊙ M)  (token-based mask)
    window-mul-seg   / window-add-seg: the same with segment-based masks

Keys are projected separately from queries (``project_keys``) so that callers can cache them:
the decoder caches its self-attention keys step by step, and cross-attention keys of the encoder
output are computed once per sentence. Everything cached has shape (B, H, S, ·).

``use_variant = False`` switches a module to plain attention with the same Q/K/V/O weights (its
extra parameters are then unused): the "window disabled" model is the plain Transformer.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attnmt.attention.localness import GaussianLocalness
from attnmt.attention.relative import RelativePositions
from attnmt.attention.window import (
    BoundaryPointers,
    WindowOptions,
    combine_additive,
    combine_multiplicative,
    soft_window_mask,
)

VARIANTS = ("standard", "relative", "localness", "window-mul", "window-add", "window-mul-seg", "window-add-seg")


def window_options(variant: str, segment: int, mask: str, renorm: bool, temperature: float) -> WindowOptions | None:
    """The WindowOptions a variant name stands for (None for non-window variants)."""
    if not variant.startswith("window-"):
        return None
    combine = variant.split("-")[1]
    return WindowOptions(combine, segment if variant.endswith("-seg") else 0, mask, renorm, temperature)


class MultiHeadAttention(nn.Module):
    def __init__(
        self,
        d_model: int,
        heads: int,
        dropout: float = 0.0,
        variant: str = "standard",
        window: WindowOptions | None = None,
        relative_clip: int = 16,
    ):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"model size {d_model} is not divisible by {heads} heads")
        if variant not in VARIANTS:
            raise ValueError(f"unknown attention variant {variant!r}")
        self.d_model, self.heads, self.head_dim = d_model, heads, d_model // heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.variant = variant
        self.use_variant = variant != "standard"
        self.dropout = dropout
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.o = nn.Linear(d_model, d_model)
        self.window = window
        if variant == "relative":
            self.relative = RelativePositions(relative_clip, self.head_dim)
        elif variant == "localness":
            self.localness = GaussianLocalness(heads, self.head_dim)
        elif window is not None:
            self.pointers = BoundaryPointers(heads, self.head_dim, window.temperature)
            if window.combine == "add":
                self.local_q = nn.Linear(d_model, d_model)  # Q_L
                self.local_k = nn.Linear(d_model, d_model)  # K_L
        for lin in (self.q, self.k, self.v, self.o):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)

    # -- shapes ---------------------------------------------------------------------------------
    def _split(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, H, T, d_h)"""
        B, T, _ = x.shape
        return x.view(B, T, self.heads, self.head_dim).transpose(1, 2)

    def _merge(self, x: torch.Tensor) -> torch.Tensor:
        B, H, T, d = x.shape
        return x.transpose(1, 2).reshape(B, T, H * d)

    @property
    def _windowed(self) -> bool:
        return self.use_variant and self.window is not None

    def project_keys(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Everything attention needs from the key side: (B, S, D) -> dict of (B, H, S, ·)."""
        k = self._split(self.k(x))
        keys = {"k": k, "v": self._split(self.v(x))}
        if self.window is not None and self.window.combine == "add":  # cached even when switched off
            keys["lk"] = self._split(self.local_k(x))  # K_L (the pointers use k itself)
        return keys

    # -- attention ------------------------------------------------------------------------------
    def forward(
        self,
        x: torch.Tensor,
        keys: dict[str, torch.Tensor],
        key_mask: torch.Tensor | None = None,
        causal: bool = False,
        q_offset: int = 0,
        need_weights: bool = False,
        internals: dict | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, D) queries; keys from ``project_keys`` (S keys); key_mask (B, S) bool, True on
        real keys (None: all real); causal: query t (absolute position q_offset + t) sees keys
        <= its position. Returns output (B, T, D) and weights (B, H, T, S) when asked.
        ``internals``, if a dict, receives the weights ``attn`` and, for window variants, the soft
        mask ``mask`` and pointers ``phi_l``, ``phi_r``, all (B, H, T, S)."""
        q = self._split(self.q(x))  # (B, H, T, d_h)
        k, v = keys["k"], keys["v"]
        B, T, S = q.size(0), q.size(2), k.size(2)
        allowed = torch.ones(1, 1, 1, S, dtype=torch.bool, device=q.device)
        if key_mask is not None:
            allowed = key_mask[:, None, None, :]
        if causal:
            pos = torch.arange(T, device=q.device) + q_offset
            allowed = allowed & (torch.arange(S, device=q.device)[None, :] <= pos[:, None])[None, None]
        drop = self.dropout if self.training else 0.0
        plain = not self.use_variant
        if plain and not need_weights and internals is None:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=drop)
            return self.o(self._merge(out)), None

        scores = (q @ k.transpose(-1, -2)) * self.scale  # (B, H, T, S)
        buckets = None
        if self.use_variant and self.variant == "relative":
            buckets = self.relative.buckets(torch.arange(T, device=q.device) + q_offset, S)
            scores = scores + self.relative.score_bias(q, buckets) * self.scale
        elif self.use_variant and self.variant == "localness":
            visible = allowed.expand(B, 1, T, S).sum(-1, keepdim=True).to(q.dtype)  # I
            scores = scores + self.localness.bias(q, visible, S)
        if self._windowed:
            w = self.window
            if w.mask == "full":  # ablation: the combiner with M ≡ 1, no window (pointers unused)
                mask = torch.ones_like(scores)
            else:
                phi_l, phi_r = self.pointers(q, k, allowed)  # (B, H, T, S) each
                mask = soft_window_mask(phi_l, phi_r, w.segment, w.mask)
            if w.combine == "mul":
                attn = combine_multiplicative(scores, mask, allowed, w.renorm)
            else:
                local = (self._split(self.local_q(x)) @ keys["lk"].transpose(-1, -2)) * self.scale
                attn = combine_additive(scores, local, mask, allowed)
            if internals is not None and w.mask != "full":
                internals.update(mask=mask, phi_l=phi_l, phi_r=phi_r)
        else:
            attn = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        if internals is not None:
            internals["attn"] = attn
        dropped = F.dropout(attn, drop, self.training) if drop > 0 else attn
        out = dropped @ v  # (B, H, T, d_h)
        if buckets is not None:
            out = out + self.relative.value_term(dropped, buckets)
        return self.o(self._merge(out)), (attn if need_weights else None)
