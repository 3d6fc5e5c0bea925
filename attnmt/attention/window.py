"""Differentiable window attention (Nguyen et al. 2020) in three small parts.

1. Boundary pointers. For every query q and head, two distributions over the n keys point at the
   window's left and right boundary (a pointer network with no boundary supervision):

       φ̂_l = softmax_k( q W_l (k W'_l)ᵀ · τ ),      φ̂_r = softmax_k( q W_r (k W'_r)ᵀ · τ )

   q, k are the head's query/key vectors; keys that are padding (and, in decoder self-attention,
   future positions) get probability exactly 0.

2. Mask builder. With U the upper-triangular ones matrix (U[i, j] = 1 for i <= j):

       f  = φ̂_l U   = P(l <= j)        g  = φ̂_r Uᵀ = P(r >= j)        M_fw = f ⊙ g
       f' = φ̂_l Uᵀ  = P(l >= j)        g' = φ̂_r U  = P(r <= j)        M_bw = f' ⊙ g'

   M_fw is the window [l, r]; since nothing forces l <= r, the backward term M_bw covers [r, l].
   The paper adds the two (``mask="sum"``). With one-hot pointers l = r = j that sum is 2 at j, so
   the default ``mask="exact"`` subtracts the doubly counted event l = r = j:

       M = M_fw + M_bw − P(l = j) P(r = j)          (mask="exact", the default)

   which is exactly P(j lies between l and r) for independent l, r: always in [0, 1], and the 0/1
   window [min(l, r), max(l, r)] for one-hot pointers. ``mask="union"`` offers the probabilistic
   OR M_fw + M_bw − M_fw ⊙ M_bw, also in [0, 1] and equal to the 0/1 window for one-hot pointers.

   Segment-based masks (segment size b) replace U by U_seg with U_seg[i, :] = U[b⌊i/b⌋, :], so a
   segment's tokens share one mask value: φ̂ U_seg at key j is the pointer mass up to the *end* of
   j's segment and φ̂ U_segᵀ the mass from the *start* of j's segment on. Both (and the token
   case) are cumulative sums gathered at segment ends/starts: O(n) per query, no n×n×n tensor.

3. Combiner.
       multiplicative:  A = softmax(QKᵀ/√d) ⊙ M                  (optionally renormalised)
       additive:        A = softmax(QKᵀ/√d + (Q_L K_Lᵀ/√d) ⊙ M)   Q_L, K_L: separate projections

Incremental decoding: with future keys excluded from the pointers, φ̂ is 0 beyond the query, so the
cumulative sums over the first t+1 keys equal those over the full sequence (segment ends are
clamped to the last visible key). A step therefore only needs the cached pointer keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

MASKS = ("exact", "union", "sum")


@dataclass
class WindowOptions:
    combine: str = "add"  # mul | add
    segment: int = 0  # segment size b; 0 = token-based
    mask: str = "exact"  # exact | union | sum (see the module docstring)
    renorm: bool = False  # multiplicative only: renormalise softmax ⊙ M to sum to one
    temperature: float = 0.0  # τ of the pointers; 0 = 1/√(head dim)


class BoundaryPointers(nn.Module):
    """φ̂_l, φ̂_r per head: two bilinear pointer distributions over the keys."""

    def __init__(self, heads: int, head_dim: int, temperature: float = 0.0):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.tau = temperature if temperature > 0 else 1.0 / math.sqrt(head_dim)
        # [W_l | W_r] and [W'_l | W'_r], one (d_h × d_h) block each per head
        self.w_query = nn.Parameter(torch.empty(heads, head_dim, 2 * head_dim))
        self.w_key = nn.Parameter(torch.empty(heads, head_dim, 2 * head_dim))
        for w in (self.w_query, self.w_key):
            nn.init.normal_(w, std=1.0 / math.sqrt(head_dim))

    def keys(self, k: torch.Tensor) -> torch.Tensor:
        """k W'_l and k W'_r side by side: (B, H, S, d_h) -> (B, H, S, 2 d_h) (cacheable)."""
        return torch.einsum("bhsd,hde->bhse", k, self.w_key)

    def forward(self, q: torch.Tensor, pointer_keys: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """q (B, H, T, d_h), pointer_keys (B, H, S, 2 d_h), allowed (B|1, 1, T|1, S) bool
        -> φ̂ (2, B, H, T, S): [φ̂_l, φ̂_r]."""
        B, H, T, d = q.shape
        S = pointer_keys.size(2)
        qp = torch.einsum("bhtd,hde->bhte", q, self.w_query).view(B, H, T, 2, d)
        kp = pointer_keys.view(B, H, S, 2, d)
        scores = torch.einsum("bhtpd,bhspd->pbhts", qp, kp) * self.tau  # (2, B, H, T, S)
        scores = scores.masked_fill(~allowed.unsqueeze(0), float("-inf"))
        return torch.softmax(scores, dim=-1)


def segment_index(n: int, segment: int, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """For keys 0..n-1: the first key of each one's segment and the last (clamped to n-1)."""
    j = torch.arange(n, device=device)
    start = (j // segment) * segment
    end = torch.clamp(start + segment - 1, max=n - 1)
    return start, end


def cumulative(phi: torch.Tensor, segment: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(φ̂ U, φ̂ Uᵀ) — or with U_seg for segment > 0 — over the last dimension of phi.

    φ̂ U at j = Σ_{i<=j} φ̂_i (= P(pointer <= j)); φ̂ Uᵀ at j = Σ_{i>=j} φ̂_i (= P(pointer >= j)).
    With segments, the first is read at the end of j's segment and the second at its start."""
    up_to = phi.cumsum(-1)
    from_on = up_to[..., -1:] - up_to + phi  # Σ_{i>=j} = total − Σ_{i<j}; exact for one-hot φ̂
    if segment > 1:
        start, end = segment_index(phi.size(-1), segment, phi.device)
        up_to = up_to.index_select(-1, end)
        from_on = from_on.index_select(-1, start)
    return up_to, from_on


def soft_window_mask(phi_l: torch.Tensor, phi_r: torch.Tensor, segment: int = 0, mask: str = "exact") -> torch.Tensor:
    """The soft mask M (…, T, S) in [0, 1] from boundary pointers φ̂_l, φ̂_r (…, T, S)."""
    f, f_back = cumulative(phi_l, segment)  # P(l <= j), P(l >= j)   (segment-level for b > 1)
    g_back, g = cumulative(phi_r, segment)  # P(r <= j), P(r >= j)
    forward = f * g  # M_fw: j in [l, r]
    backward = f_back * g_back  # M_bw: j in [r, l]
    if mask == "sum":  # the paper's literal M_fw + M_bw (reaches 2 where l = r = j)
        return forward + backward
    if mask == "union":
        m = forward + backward - forward * backward
    elif mask == "exact":
        # minus P(l at j) P(r at j): φ̂ itself, or the segment's mass P(l <= j) + P(l >= j) − 1
        if segment > 1:
            m = forward + backward - (f + f_back - 1.0) * (g + g_back - 1.0)
        else:
            m = forward + backward - phi_l * phi_r
    else:
        raise ValueError(f"unknown window mask {mask!r} (expected one of {', '.join(MASKS)})")
    return m.clamp(0.0, 1.0)  # only rounding can leave [0, 1]


def combine_multiplicative(scores: torch.Tensor, window: torch.Tensor, allowed: torch.Tensor, renorm: bool = False) -> torch.Tensor:
    """A = softmax(QKᵀ/√d) ⊙ M; scores (B, H, T, S) already scaled, window M (B, H, T, S)."""
    attn = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) * window
    if renorm:
        attn = attn / attn.sum(-1, keepdim=True).clamp_min(1e-9)
    return attn


def combine_additive(scores: torch.Tensor, local_scores: torch.Tensor, window: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """A = softmax(QKᵀ/√d + (Q_L K_Lᵀ/√d) ⊙ M): the global context stays, the window adds to it."""
    return torch.softmax((scores + local_scores * window).masked_fill(~allowed, float("-inf")), dim=-1)


def window_boundaries(phi_l: torch.Tensor, phi_r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Hard boundaries (min, max of argmax l and r) for display: (…, T) long each."""
    lft, rgt = phi_l.argmax(-1), phi_r.argmax(-1)
    return torch.minimum(lft, rgt), torch.maximum(lft, rgt)
