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
        return k @ self.w_key

    def forward(self, q: torch.Tensor, pointer_keys: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q (B, H, T, d_h), pointer_keys (B, H, S, 2 d_h), allowed (B|1, 1, T|1, S) bool
        -> φ̂_l, φ̂_r (B, H, T, S)."""
        d = self.head_dim
        qp = q @ self.w_query  # (B, H, T, 2 d_h): q W_l | q W_r (batched over heads, no permute)
        blocked = ~allowed
        out = []
        for side in (slice(0, d), slice(d, 2 * d)):
            scores = (qp[..., side] @ pointer_keys[..., side].transpose(-1, -2)) * self.tau
            out.append(torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1))
        return out[0], out[1]


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


def _mask_terms(phi_l: torch.Tensor, phi_r: torch.Tensor, segment: int, mask: str):
    """M before clamping, and the pieces it is made of (for the backward pass)."""
    f, f_back = cumulative(phi_l, segment)  # P(l <= j), P(l >= j)   (segment-level for b > 1)
    g_back, g = cumulative(phi_r, segment)  # P(r <= j), P(r >= j)
    forward = f * g  # M_fw: j in [l, r]
    backward = f_back * g_back  # M_bw: j in [r, l]
    point_l = point_r = None
    if mask == "sum":  # the paper's literal M_fw + M_bw (reaches 2 where l = r = j)
        m = forward + backward
    elif mask == "union":
        m = forward + backward - forward * backward
    elif mask == "exact":
        # minus P(l at j) P(r at j): φ̂ itself, or the segment's mass P(l <= j) + P(l >= j) − 1
        point_l = f + f_back - 1.0 if segment > 1 else phi_l
        point_r = g + g_back - 1.0 if segment > 1 else phi_r
        m = forward + backward - point_l * point_r
    else:
        raise ValueError(f"unknown window mask {mask!r} (expected one of {', '.join(MASKS)})")
    return m, (f, f_back, g, g_back, forward, backward, point_l, point_r)


def _to_pointer_grad(d_up: torch.Tensor, d_from: torch.Tensor, segment: int) -> torch.Tensor:
    """Gradient wrt φ̂ from gradients wrt (φ̂ U, φ̂ Uᵀ) as read per key (segment ends/starts)."""
    if segment > 1:
        start, end = segment_index(d_up.size(-1), segment, d_up.device)
        d_up = torch.zeros_like(d_up).index_add_(-1, end, d_up)
        d_from = torch.zeros_like(d_from).index_add_(-1, start, d_from)
    # Σ_{j<=i}-cumsum feeds every later key: its adjoint is the suffix sum; and vice versa
    up_cum = d_up.cumsum(-1)
    return (up_cum[..., -1:] - up_cum + d_up) + d_from.cumsum(-1)


class _SoftWindowMask(torch.autograd.Function):
    """M from φ̂_l, φ̂_r saving only φ̂_l, φ̂_r (which the pointer softmax keeps anyway): the
    cumulative sums are recomputed in backward instead of holding ~6 extra (B, H, T, S) tensors."""

    @staticmethod
    def forward(ctx, phi_l, phi_r, segment: int, mask: str):
        m, _ = _mask_terms(phi_l, phi_r, segment, mask)
        ctx.save_for_backward(phi_l, phi_r)
        ctx.segment, ctx.mask = segment, mask
        return m if mask == "sum" else m.clamp(0.0, 1.0)  # only rounding can leave [0, 1]

    @staticmethod
    def backward(ctx, grad):
        phi_l, phi_r = ctx.saved_tensors
        segment, mask = ctx.segment, ctx.mask
        m, (f, f_back, g, g_back, fw, bw, point_l, point_r) = _mask_terms(phi_l, phi_r, segment, mask)
        if mask != "sum":  # clamp's gradient: zero where the clamp was active
            grad = grad * ((m >= 0) & (m <= 1)).to(grad.dtype)
        d_fw, d_bw = (grad * (1 - bw), grad * (1 - fw)) if mask == "union" else (grad, grad)
        d_f, d_g, d_fb, d_gb = d_fw * g, d_fw * f, d_bw * g_back, d_bw * f_back
        direct_l = direct_r = 0.0
        if mask == "exact":
            d_pl, d_pr = -grad * point_r, -grad * point_l
            if segment > 1:  # point = P(<= end) + P(>= start) − 1
                d_f, d_fb, d_g, d_gb = d_f + d_pl, d_fb + d_pl, d_g + d_pr, d_gb + d_pr
            else:
                direct_l, direct_r = d_pl, d_pr
        d_phi_l = _to_pointer_grad(d_f, d_fb, segment) + direct_l
        d_phi_r = _to_pointer_grad(d_gb, d_g, segment) + direct_r  # g = P(r >= j) is the "from" side
        return d_phi_l, d_phi_r, None, None


def soft_window_mask(phi_l: torch.Tensor, phi_r: torch.Tensor, segment: int = 0, mask: str = "exact") -> torch.Tensor:
    """The soft mask M (…, T, S) from boundary pointers φ̂_l, φ̂_r (…, T, S); in [0, 1] except
    for mask="sum", which reaches 2 where both pointers sit on the same key (segment)."""
    if mask not in MASKS:
        raise ValueError(f"unknown window mask {mask!r} (expected one of {', '.join(MASKS)})")
    return _SoftWindowMask.apply(phi_l, phi_r, segment, mask)


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
