"""Differentiable window attention (Nguyen et al. 2020) in three small parts.

1. Boundary pointers. For every query and head, two distributions over the n keys point at the
   window's left and right boundary (a pointer network with no boundary supervision). Two forms
   (``pointers``):

       attention:  φ̂_l = softmax_k( q W_l (k W'_l)ᵀ · τ )           q, k: the head's own query/key
       input:      φ̂_l = softmax_k( (x W^q_l + b) (y W^k_l + b)ᵀ · τ )   x, y: the layer's query-side
                                                                       and key-side inputs

   and φ̂_r likewise. ``input`` is the authors' form (tungngthanh/dynamic-attention: separate
   projections of the layer input per side, split into heads, τ = 1); ``attention`` reuses the
   attention's projected q and k (nothing extra to cache). Keys that are padding (and, in decoder
   self-attention, future positions) get probability exactly 0.

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
   j's segment and φ̂ U_segᵀ the mass from the *start* of j's segment on. These are the prefix
   and suffix sums of the segment masses P = φ̂ E (E: the key-to-segment 0/1 matrix), so a segment
   mask is the token mask of P spread over each segment's keys. Everything is cumulative sums:
   O(n) per query (O(n/b) for segments), no n×n×n tensor.

3. Combiner.
       multiplicative:  A = softmax(QKᵀ/√d) ⊙ M                  (optionally renormalised)
       additive:        A = softmax(QKᵀ/√d + (Q_L K_Lᵀ/√d) ⊙ M)   Q_L, K_L: separate projections

The ``paper`` preset (``PRESETS``) is the authors' method: mask ``sum``, pointers ``input``,
τ = 1, segment size b = 5; config.from_dict applies it (model.window_preset: paper).

Incremental decoding: with future keys excluded from the pointers, φ̂ is 0 beyond the query, so the
cumulative sums over the first t+1 keys equal those over the full sequence (segment ends are
clamped to the last visible key). A step therefore only needs the cached keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from attnmt.attention.variant import Variant, mapped, masked
from attnmt.errors import key_error
from attnmt.kernels import packed

MASKS = ("exact", "union", "sum")
ABLATIONS = ("full",)  # window_mask values that keep the combiner but drop the window (M ≡ 1)
POINTERS = ("attention", "input")  # where the pointer scores come from (module docstring, part 1)
# model.window_* values a preset fixes. "paper": the authors' code (tungngthanh/dynamic-attention,
# LearnableGlobalLocalMultiheadAttention): M = (φ̂_l U)⊙(φ̂_r Uᵀ) + (φ̂_l Uᵀ)⊙(φ̂_r U), pointer
# scores of separate projections of the layer input, unscaled (τ = 1); segment size 5 (their
# num_block). Placement (encoder self- and cross-attention, lower layers) is the config's
# enc_self_attention / cross_attention / attention_layers (configs/paper-window-*.yaml).
PRESETS = {
    "none": {},
    "paper": {"window_mask": "sum", "window_pointers": "input", "window_temperature": 1.0, "window_segment": 5},
}


@dataclass
class WindowOptions:
    combine: str = "add"  # mul | add
    segment: int = 0  # segment size b; 0 = token-based
    mask: str = "exact"  # exact | union | sum (see the module docstring)
    renorm: bool = False  # multiplicative only: renormalise softmax ⊙ M to sum to one
    temperature: float = 0.0  # τ of the pointers; 0 = 1/√(head dim)
    pointers: str = "attention"  # attention (the head's q, k) | input (separate projections; paper)


class BoundaryPointers(nn.Module):
    """φ̂_l, φ̂_r per head: two bilinear pointer distributions over the keys.

    q W_l (k W'_l)ᵀ = q (W_l W'_lᵀ) kᵀ: the d_h × d_h product A_l = W_l W'_lᵀ (and A_r) is formed
    once per call, so the pointers need one projection of the queries, q [A_l | A_r] τ, and one
    product with the attention's own keys for both sides — no projection of the keys (and nothing
    extra to cache while decoding). The parameters stay W and W' (same model, same gradients)."""

    def __init__(self, heads: int, head_dim: int, temperature: float = 0.0):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.tau = temperature if temperature > 0 else 1.0 / math.sqrt(head_dim)
        # [W_l | W_r] and [W'_l | W'_r], one (d_h × d_h) block each per head
        self.w_query = nn.Parameter(torch.empty(heads, head_dim, 2 * head_dim))
        self.w_key = nn.Parameter(torch.empty(heads, head_dim, 2 * head_dim))
        for w in (self.w_query, self.w_key):
            nn.init.normal_(w, std=1.0 / math.sqrt(head_dim))

    def bilinear(self) -> torch.Tensor:
        """τ [W_l W'_lᵀ | W_r W'_rᵀ]: (H, d_h, 2 d_h)."""
        H, d = self.heads, self.head_dim
        w = self.w_query.view(H, d, 2, d).transpose(1, 2)  # (H, 2, d, d): W_l, W_r
        w_key_t = self.w_key.view(H, d, 2, d).permute(0, 2, 3, 1)  # (H, 2, d, d): W'_lᵀ, W'_rᵀ
        return ((w @ w_key_t) * self.tau).transpose(1, 2).reshape(H, d, 2 * d)

    def forward(self, q: torch.Tensor, k: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q (B, H, T, d_h) queries, k (B, H, S, d_h) the attention's keys, allowed (B|1, 1, T|1, S)
        bool -> φ̂_l, φ̂_r (B, H, T, S)."""
        B, H, T, d = q.shape
        S = k.size(2)
        # einsum batches over heads ((B T) × d_h by d_h × 2 d_h each): cheaper than a matmul
        # broadcast over B, whose weight gradient is a sum over B
        qa = packed.einsum("bhtd,hde->bhte", q, self.bilinear()).reshape(B, H, 2 * T, d)  # rows (t, side)
        scores = masked(packed.matmul(qa, k.transpose(-1, -2)).view(B, H, T, 2, S), allowed.unsqueeze(-2))
        phi_l, phi_r = torch.softmax(scores, dim=-1).unbind(-2)
        return phi_l, phi_r


class InputPointers(nn.Module):
    """φ̂_l, φ̂_r per head from separate projections of the layer's inputs (the authors' form):

        φ̂_side = softmax_k( τ · (x W^q_side + b^q_side)_h (y W^k_side + b^k_side)_hᵀ )

    x (B, T, D) the query-side input, y (B, S, D) the key-side input (the same sequence in
    self-attention, the encoder output in cross-attention); _h takes head h's d_h columns. The key
    projections of both sides are one cached key tensor (B, H, S, 2 d_h). ``linear``: the class
    of the two maps, the attention's own (the Transformer's PackedLinear: bfloat16 products under
    train.amp, packed weights in a search, like its other projections); its parameter names are
    nn.Linear's, so checkpoints are the same."""

    def __init__(self, d_model: int, heads: int, temperature: float = 0.0,
                 linear: type[nn.Linear] = nn.Linear):
        super().__init__()
        self.heads, self.head_dim = heads, d_model // heads
        self.tau = temperature if temperature > 0 else 1.0 / math.sqrt(self.head_dim)
        self.query = linear(d_model, 2 * d_model)  # [W^q_l | W^q_r]
        self.key = linear(d_model, 2 * d_model)  # [W^k_l | W^k_r]
        for lin in (self.query, self.key):  # each D × D block initialised like the attention's q, k
            for block in lin.weight.data.chunk(2, dim=0):
                nn.init.xavier_uniform_(block)
            nn.init.zeros_(lin.bias)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        """(B, N, 2D) -> (B, H, N, 2 d_h): per head, its left d_h columns then its right ones."""
        B, N, _ = x.shape
        return x.view(B, N, 2, self.heads, self.head_dim).permute(0, 3, 1, 2, 4).reshape(B, self.heads, N, 2 * self.head_dim)

    def forward(self, q: torch.Tensor, keys: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q = split(query(x)) (B, H, T, 2 d_h), keys = split(key(y)) (B, H, S, 2 d_h), allowed
        (B|1, 1, T|1, S) bool -> φ̂_l, φ̂_r (B, H, T, S)."""
        B, H, T, S, d = q.size(0), q.size(1), q.size(2), keys.size(2), self.head_dim
        sides_q = q.view(B, H, T, 2, d).transpose(2, 3)  # (B, H, 2, T, d_h): left, right
        sides_k = keys.view(keys.size(0), H, S, 2, d).transpose(2, 3)  # (B, H, 2, S, d_h)
        scores = packed.matmul(sides_q, sides_k.transpose(-1, -2)) * self.tau  # both sides in one product
        phi_l, phi_r = torch.softmax(masked(scores, allowed.unsqueeze(2)), dim=-1).unbind(2)
        return phi_l, phi_r


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


def _segment_matrix(n: int, segment: int, like: torch.Tensor) -> torch.Tensor:
    """E (n, ⌈n/b⌉) with E[j, s] = 1 when key j lies in segment s (the last may be shorter)."""
    j = torch.arange(n, device=like.device)
    return (j[:, None] // segment == torch.arange(-(-n // segment), device=like.device)).to(like.dtype)


def segment_mass(x: torch.Tensor, segment: int) -> torch.Tensor:
    """(…, n) -> (…, ⌈n/b⌉): the sum over each segment's keys (x E: one small matrix product,
    cheaper than padding and summing groups of b)."""
    return _rows_times(x, _segment_matrix(x.size(-1), segment, x))


def expand_segments(x: torch.Tensor, segment: int, n: int) -> torch.Tensor:
    """(…, ⌈n/b⌉) -> (…, n): every key takes its segment's value (x Eᵀ; exact: one 1 per row)."""
    return _rows_times(x, _segment_matrix(n, segment, x).t())


def _rows_times(x: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """x @ matrix as one matrix product of x's rows: torch's matmul of a strided x (a pointer's
    view of both sides' softmax) instead broadcasts the small matrix into a batched product,
    ~4x slower on the CPU than copying x's rows first."""
    return (x.reshape(-1, x.size(-1)) @ matrix).view(*x.shape[:-1], matrix.size(1))


# Segment-based masks. Reading φ̂'s prefix sum at the end of j's segment is the prefix sum of the
# segment masses P (the pointer's probability of landing in each segment) up to j's segment, and the
# suffix sum from its start likewise; P(l in j's segment) = f + f' − 1 is P itself. So a segment
# mask is the token mask of the segment masses, spread over the segment's keys: the cumulative sums,
# products and their backward run on ⌈n/b⌉ columns instead of n (b times less work).


def _mask_terms(phi_l: torch.Tensor, phi_r: torch.Tensor, mask: str):
    """Token-level M before clamping, and the pieces it is made of (for the backward pass)."""
    f, f_back = cumulative(phi_l)  # P(l <= j), P(l >= j)
    g_back, g = cumulative(phi_r)  # P(r <= j), P(r >= j)
    forward = f * g  # M_fw: j in [l, r]
    backward = f_back * g_back  # M_bw: j in [r, l]
    if mask == "sum":  # the paper's literal M_fw + M_bw (reaches 2 where l = r = j)
        m = forward + backward
    elif mask == "union":
        m = forward + backward - forward * backward
    elif mask == "exact":
        m = forward + backward - phi_l * phi_r  # minus P(l at j) P(r at j)
    else:
        raise ValueError(f"unknown window mask {mask!r} (expected one of {', '.join(MASKS)})")
    return m, (f, f_back, g, g_back, forward, backward)


def _mask_backward(grad: torch.Tensor, phi_l: torch.Tensor, phi_r: torch.Tensor, mask: str):
    """Gradients wrt φ̂_l, φ̂_r of the token-level mask, given the gradient wrt M."""
    m, (f, f_back, g, g_back, fw, bw) = _mask_terms(phi_l, phi_r, mask)
    if mask != "sum":  # clamp's gradient: zero where the clamp was active
        grad = grad * ((m >= 0) & (m <= 1)).to(grad.dtype)
    d_fw, d_bw = (grad * (1 - bw), grad * (1 - fw)) if mask == "union" else (grad, grad)
    # f = φ̂ U feeds keys j >= i (adjoint: suffix sum), f' = φ̂ Uᵀ feeds keys j <= i (prefix sum):
    # d φ̂_i = Σ_{j>=i} d_f[j] + Σ_{j<=i} d_f'[j] = Σ d_f + cumsum(d_f' − d_f)_i + d_f[i]
    d_f, d_fb = d_fw * g, d_bw * g_back
    d_phi_l = d_f.sum(-1, keepdim=True) + (d_fb - d_f).cumsum(-1) + d_f
    d_gb, d_g = d_bw * f_back, d_fw * f  # g' = φ̂_r U ("up to"), g = φ̂_r Uᵀ ("from")
    d_phi_r = d_gb.sum(-1, keepdim=True) + (d_g - d_gb).cumsum(-1) + d_gb
    if mask == "exact":
        d_phi_l = d_phi_l - grad * phi_r
        d_phi_r = d_phi_r - grad * phi_l
    return d_phi_l, d_phi_r


class _SoftWindowMask(torch.autograd.Function):
    """M from φ̂_l, φ̂_r saving only φ̂_l, φ̂_r (which the pointer softmax keeps anyway): the
    cumulative sums are recomputed in backward instead of holding ~6 extra (B, H, T, S) tensors."""

    @staticmethod
    def forward(ctx, phi_l, phi_r, segment: int, mask: str):
        ctx.save_for_backward(phi_l, phi_r)
        ctx.segment, ctx.mask, n = segment, mask, phi_l.size(-1)
        if segment > 1:
            phi_l, phi_r = segment_mass(phi_l, segment), segment_mass(phi_r, segment)
        m, _ = _mask_terms(phi_l, phi_r, mask)
        if mask != "sum":
            m = m.clamp(0.0, 1.0)  # only rounding can leave [0, 1]
        return expand_segments(m, segment, n) if segment > 1 else m

    @staticmethod
    def backward(ctx, grad):
        phi_l, phi_r = ctx.saved_tensors
        segment, n = ctx.segment, phi_l.size(-1)
        if segment > 1:  # a segment's keys share one value: its gradient is their sum
            phi_l, phi_r, grad = (segment_mass(t, segment) for t in (phi_l, phi_r, grad))
        d_phi_l, d_phi_r = _mask_backward(grad, phi_l, phi_r, ctx.mask)
        if segment > 1:  # every key of a segment adds to its mass alike
            d_phi_l, d_phi_r = expand_segments(d_phi_l, segment, n), expand_segments(d_phi_r, segment, n)
        return d_phi_l, d_phi_r, None, None


def soft_window_mask(phi_l: torch.Tensor, phi_r: torch.Tensor, segment: int = 0, mask: str = "exact") -> torch.Tensor:
    """The soft mask M (…, T, S) from boundary pointers φ̂_l, φ̂_r (…, T, S); in [0, 1] except
    for mask="sum", which reaches 2 where both pointers sit on the same key (segment)."""
    if mask not in MASKS:
        raise ValueError(f"unknown window mask {mask!r} (expected one of {', '.join(MASKS)})")
    return _SoftWindowMask.apply(phi_l, phi_r, segment, mask)


def combine_multiplicative(scores: torch.Tensor, window: torch.Tensor, allowed: torch.Tensor, renorm: bool = False) -> torch.Tensor:
    """A = softmax(QKᵀ/√d) ⊙ M; scores (B, H, T, S) already scaled, window M (B, H, T, S)."""
    attn = torch.softmax(masked(scores, allowed), dim=-1) * window
    if renorm:
        attn = attn / attn.sum(-1, keepdim=True).clamp_min(1e-9)
    return attn


def combine_additive(scores: torch.Tensor, local_scores: torch.Tensor, window: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """A = softmax(QKᵀ/√d + (Q_L K_Lᵀ/√d) ⊙ M): the global context stays, the window adds to it."""
    return torch.softmax(masked(torch.addcmul(scores, local_scores, window), allowed), dim=-1)


def window_boundaries(phi_l: torch.Tensor, phi_r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Hard boundaries (min, max of argmax l and r) for display: (…, T) long each."""
    lft, rgt = phi_l.argmax(-1), phi_r.argmax(-1)
    return torch.minimum(lft, rgt), torch.maximum(lft, rgt)


def window_options(variant: str, segment: int = 3, mask: str = "exact", renorm: bool = False,
                   temperature: float = 0.0, pointers: str = "attention") -> WindowOptions | None:
    """The WindowOptions a variant name stands for (None for non-window variants)."""
    if variant not in Window.names:
        return None
    combine = variant.split("-")[1]
    return WindowOptions(combine, segment if variant.endswith("-seg") else 0, mask, renorm, temperature, pointers)


class Window(Variant):
    """The variant family window-{mul,add}[-seg]: boundary pointers (attn.pointers) make the soft
    mask M, which the combiner applies to the weights (mul) or to separate local scores
    Q_L K_Lᵀ/√d (add; attn.local_q, attn.local_k, cached key "lk"). Input pointers cache their
    key projections as "pk". These maps' products come in ``given`` (``maps``: one stacked
    product with Q, K, V in self-attention, MultiHeadAttention.project_self; with K, V and with Q
    apart in cross-attention, project_keys / project_queries); the math is the same."""

    names = ("window-mul", "window-add", "window-mul-seg", "window-add-seg")

    def __init__(self, name: str = "window-add", window: WindowOptions | None = None, relative_clip: int = 16):
        super().__init__(name)
        self.options = window or window_options(name)

    @classmethod
    def check(cls, cfg, kind: str, fail=key_error) -> None:
        super().check(cfg, kind, fail)
        if cfg.window_mask not in MASKS + ABLATIONS:
            fail("model.window_mask", f"must be one of {', '.join(MASKS + ABLATIONS)}, not {cfg.window_mask!r}")
        if cfg.window_segment < 1:
            fail("model.window_segment", f"must be at least 1, got {cfg.window_segment}")
        if cfg.window_pointers not in POINTERS:
            fail("model.window_pointers", f"must be one of {', '.join(POINTERS)}, not {cfg.window_pointers!r}")

    def build(self, attn) -> None:
        if self.options.pointers == "input":
            attn.pointers = InputPointers(attn.d_model, attn.heads, self.options.temperature, attn.linear)
        else:
            attn.pointers = BoundaryPointers(attn.heads, attn.head_dim, self.options.temperature)
        if self.options.combine == "add":
            attn.local_q = attn.linear(attn.d_model, attn.d_model)  # Q_L
            attn.local_k = attn.linear(attn.d_model, attn.d_model)  # K_L

    def maps(self, attn: nn.Module) -> tuple[dict[str, nn.Module], dict[str, nn.Module]]:
        w, queries, keys = self.options, {}, {}
        if w.pointers == "input":
            keys["pk"] = attn.pointers.key
            if w.mask != "full":  # the ablation never reads the pointers' queries
                queries["pq"] = attn.pointers.query
        if w.combine == "add":
            queries["lq"], keys["lk"] = attn.local_q, attn.local_k
        return queries, keys

    def key_layout(self, name, key):
        """K_L as a contiguous K_Lᵀ (q_L K_Lᵀ) like K; the input pointers' keys (B, H, S, 2 d_h)
        with each side's (d_h, S) block contiguous, the operand ``InputPointers`` multiplies by."""
        if name == "lk":
            return super().key_layout("k", key)
        if name == "pk":
            B, H, S, d2 = key.shape
            sides = key.reshape(B, H, S, 2, d2 // 2).permute(0, 1, 3, 4, 2).contiguous()  # (B, H, 2, d_h, S)
            return sides.permute(0, 1, 4, 2, 3).view(B, H, S, d2)  # the same values, (B, H, S, 2 d_h)
        return super().key_layout(name, key)

    def keys(self, attn, x, given=None):
        keys = {}
        if self.options.pointers == "input":
            keys["pk"] = attn.pointers.split(mapped(attn.pointers.key, x, given, "pk"))
        if self.options.combine == "add":
            keys["lk"] = attn._split(mapped(attn.local_k, x, given, "lk"))  # K_L
        return keys

    def weights(self, attn, scores, q, x, keys, allowed, internals, given=None):
        w = self.options
        if w.mask == "full":  # ablation: the combiner with M ≡ 1, no window (pointers unused)
            mask = torch.ones_like(scores)
        else:
            if w.pointers == "input":
                queries = attn.pointers.split(mapped(attn.pointers.query, x, given, "pq"))
                phi_l, phi_r = attn.pointers(queries, keys["pk"], allowed)  # (B, H, T, S) each
            else:
                phi_l, phi_r = attn.pointers(q, keys["k"], allowed)
            mask = soft_window_mask(phi_l, phi_r, w.segment, w.mask)
            if internals is not None:
                internals.update(mask=mask, phi_l=phi_l, phi_r=phi_r)
        if w.combine == "mul":
            return combine_multiplicative(scores, mask, allowed, w.renorm)
        local_q = attn._split(mapped(attn.local_q, x, given, "lq"))  # Q_L
        local = packed.matmul(local_q, keys["lk"].transpose(-1, -2)) * attn.scale
        return combine_additive(scores, local, mask, allowed)
