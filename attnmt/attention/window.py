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
from functools import lru_cache

import torch
from torch import nn

from attnmt.attention.variant import Variant, mapped, masked, register
from attnmt.errors import key_error
from attnmt.kernels import packed
from attnmt.kernels.cache import derived

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
        """τ [W_l W'_lᵀ | W_r W'_rᵀ]: (H, d_h, 2 d_h); without autograd (a search step, validation)
        kept per version of the weights instead of formed at every call."""
        if torch.is_grad_enabled():
            return self._bilinear()
        return derived(self, "bilinear", (self.w_query, self.w_key), self._bilinear)

    def _bilinear(self) -> torch.Tensor:
        H, d = self.heads, self.head_dim
        w = self.w_query.view(H, d, 2, d).transpose(1, 2)  # (H, 2, d, d): W_l, W_r
        w_key_t = self.w_key.view(H, d, 2, d).permute(0, 2, 3, 1)  # (H, 2, d, d): W'_lᵀ, W'_rᵀ
        return ((w @ w_key_t) * self.tau).transpose(1, 2).reshape(H, d, 2 * d)

    def with_scores(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q Kᵀ (B, H, T, S) and the pointer scores [q A_l; q A_r] Kᵀ (B, H, 2, T, S), as one product
        of the stacked queries [q; q A_l; q A_r] (B, H, 3T, d_h): both multiply the same K."""
        B, H, T, d = q.shape
        # einsum batches over heads ((B T) × d_h by d_h × 2 d_h each): cheaper than a matmul
        # broadcast over B, whose weight gradient is a sum over B. q is rounded for each use on its
        # own, so that its two gradients add up in float32.
        qa = torch.einsum("bhtd,hde->bhte", packed.operand(q), packed.operand(self.bilinear()))
        stacked = torch.cat((packed.operand(q).unsqueeze(2), qa.view(B, H, T, 2, d).transpose(2, 3)), 2)
        both = packed.matmul(stacked.view(B, H, 3 * T, d), k.transpose(-1, -2)).view(B, H, 3, T, k.size(2))
        scores, pointers = both.split((1, 2), dim=2)  # (a split's gradient is one cat, no zero fills)
        return scores.squeeze(2), pointers

    def forward(self, q: torch.Tensor, k: torch.Tensor, allowed: torch.Tensor,
                scores: torch.Tensor | None = None) -> torch.Tensor:
        """q (B, H, T, d_h) queries, k (B, H, S, d_h) the attention's keys, allowed (B|1, 1, T|1, S)
        bool -> φ̂ (B, H, 2, T, S): [φ̂_l; φ̂_r] on dim −3. ``scores``: the pointer scores (B, H, 2,
        T, S) where ``with_scores`` made them with the attention's own."""
        if scores is None:
            scores = self.with_scores(q, k)[1]
        return torch.softmax(masked(scores, allowed.unsqueeze(-3)), dim=-1)


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
        """(B, N, 2D) -> (B, H, N, 2 d_h): per head, its left d_h columns then its right ones.
        Laid out (B, H, 2, d_h, N) underneath (one copy): each side's block is then an operand
        of ``scores``' product as it lies, transposed or not."""
        B, N, _ = x.shape
        sides = x.view(B, N, 2, self.heads, self.head_dim).permute(0, 3, 2, 4, 1).contiguous()
        return sides.permute(0, 1, 4, 2, 3).view(B, self.heads, N, 2 * self.head_dim)

    def forward(self, q: torch.Tensor, keys: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """q = split(query(x)) (B, H, T, 2 d_h), keys = split(key(y)) (B, H, S, 2 d_h), allowed
        (B|1, 1, T|1, S) bool -> φ̂ (B, H, 2, T, S): [φ̂_l; φ̂_r] on dim −3."""
        return torch.softmax(masked(self.scores(q, keys), allowed.unsqueeze(2)), dim=-1)

    def scores(self, q: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """The pointer scores τ q_side keys_sideᵀ (B, H, 2, T, S) of ``forward``'s q and keys."""
        B, H, T, S, d = q.size(0), q.size(1), q.size(2), keys.size(2), self.head_dim
        sides_q = q.view(B, H, T, 2, d).transpose(2, 3)  # (B, H, 2, T, d_h): left, right
        sides_k = keys.view(keys.size(0), H, S, 2, d).transpose(2, 3)  # (B, H, 2, S, d_h)
        scores = packed.matmul(sides_q, sides_k.transpose(-1, -2))  # both sides in one product
        return scores if self.tau == 1.0 else scores * self.tau


def _segment_of(n: int, segment: int, device: torch.device) -> torch.Tensor:
    """For keys 0..n-1 the index of each one's segment (⌊j/b⌋)."""
    return torch.arange(n, device=device) // segment


def segment_mass(x: torch.Tensor, segment: int) -> torch.Tensor:
    """(…, n) -> (…, ⌈n/b⌉): the sum over each segment's keys (x E, E the key-to-segment 0/1
    matrix, as one index_add: ~2x faster than the product at these shapes)."""
    n = x.size(-1)
    out = x.new_zeros(*x.shape[:-1], -(-n // segment))
    return out.index_add_(-1, _segment_of(n, segment, x.device), x)


def expand_segments(x: torch.Tensor, segment: int, n: int) -> torch.Tensor:
    """(…, ⌈n/b⌉) -> (…, n): every key takes its segment's value (x Eᵀ, exact: one 1 per row; as
    one product of x's rows, ~2.5x faster than a gather along the short last dimension)."""
    m = x.size(-1)
    return (x.reshape(-1, m) @ _spread(n, segment, m, x.dtype, x.device)).view(*x.shape[:-1], n)


@lru_cache(maxsize=64)
def _spread(n: int, segment: int, m: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Eᵀ (m, n): 1 where key j lies in segment i (made once per size: a search step asks at every step)."""
    return (_segment_of(n, segment, device)[None, :] == torch.arange(m, device=device)[:, None]).to(dtype)


# Segment-based masks. Reading φ̂'s prefix sum at the end of j's segment is the prefix sum of the
# segment masses P (the pointer's probability of landing in each segment) up to j's segment, and the
# suffix sum from its start likewise; P(l in j's segment) = f + f' − 1 is P itself. So a segment
# mask is the token mask of the segment masses, spread over the segment's keys: the cumulative sums,
# products and their backward run on ⌈n/b⌉ columns instead of n (b times less work).
#
# Both pointers travel as one tensor P (…, 2, T, n) = [φ̂_l; φ̂_r] (sides before the queries, so
# that each side is one block of T·n and a (…, T, n) tensor broadcasts over the sides in whole
# blocks), and every step below is one call for both sides: up = P U = [f; g'] (P(· <= j)),
# down = P Uᵀ = [f'; g] (P(· >= j)); M_fw = f g, M_bw = f' g' pair each side of ``up`` with the
# other side of ``down``.


def _mask_terms(p: torch.Tensor, mask: str):
    """Token-level M (…, T, n) before clamping from P (…, 2, T, n), and what its backward reads:
    (up, down, M_fw, M_bw), the last two only for ``mask="union"`` (else None). ``window_mask``
    checks ``mask``."""
    up = p.cumsum(-1)  # [P(l <= j); P(r <= j)]
    down = torch.sub(up[..., -1:], up).add_(p)  # [P(l >= j); P(r >= j)]: total − Σ_{i<j}; exact for one-hot P
    (f, g_back), (f_back, g) = up.unbind(-3), down.unbind(-3)
    if mask == "union":  # M_fw + M_bw − M_fw M_bw
        forward, backward = f * g, f_back * g_back  # M_fw: j in [l, r]; M_bw: j in [r, l]
        return forward + backward - forward * backward, (up, down, forward, backward)
    m = torch.mul(f, g).addcmul_(f_back, g_back)  # M_fw + M_bw: the paper's literal "sum" (2 where l = r = j)
    if mask == "exact":
        m.addcmul_(p.select(-3, 0), p.select(-3, 1), value=-1)  # minus P(l at j) P(r at j)
    return m, (up, down, None, None)


def _mask_backward(grad: torch.Tensor, p: torch.Tensor, mask: str, terms: tuple | None = None) -> torch.Tensor:
    """The gradient wrt P (…, 2, T, n) of the token-level mask, given the gradient wrt M (…, T, n);
    ``terms``: ``_mask_terms(p, mask)[1]`` where the forward kept them. The clamp to [0, 1] only
    corrects rounding (M lies in [0, 1] in exact arithmetic), so its gradient is taken as 1: the
    gradient of the mask's definition."""
    up, down, fw, bw = terms or _mask_terms(p, mask)[1]
    if mask == "union":  # d M / d M_fw = 1 − M_bw, d M / d M_bw = 1 − M_fw
        d_fw, d_bw = grad * (1 - bw), grad * (1 - fw)
    else:  # both terms enter with weight 1
        d_fw = d_bw = grad
    # M_fw = f g = up_l down_r, M_bw = f' g' = down_l up_r: each side's factor times the other's
    (f, g_back), (f_back, g) = up.unbind(-3), down.unbind(-3)
    d_up, d_down = torch.empty_like(up), torch.empty_like(down)
    torch.mul(d_fw, g, out=d_up[..., 0, :, :])  # d f
    torch.mul(d_bw, f_back, out=d_up[..., 1, :, :])  # d g'
    torch.mul(d_bw, g_back, out=d_down[..., 0, :, :])  # d f'
    torch.mul(d_fw, f, out=d_down[..., 1, :, :])  # d g
    # up = P U feeds keys j >= i (adjoint: suffix sum), down = P Uᵀ feeds keys j <= i (prefix sum):
    # d P_i = Σ_{j>=i} d_up[j] + Σ_{j<=i} d_down[j] = Σ d_up + cumsum(d_down − d_up)_i + d_up[i]
    d_p = d_down.sub_(d_up).cumsum_(-1).add_(d_up).add_(d_up.sum(-1, keepdim=True))
    if mask == "exact":  # minus P(l at j) P(r at j)
        d_p[..., 0, :, :].addcmul_(grad, p[..., 1, :, :], value=-1)
        d_p[..., 1, :, :].addcmul_(grad, p[..., 0, :, :], value=-1)
    return d_p


def _mask_forward(phi: torch.Tensor, segment: int, mask: str):
    """M (…, T, S) from φ̂ (…, 2, T, S), and what its backward reads: (M, P, ``_mask_terms``'
    pieces), P the segment masses (φ̂ itself for a token mask)."""
    p = segment_mass(phi, segment) if segment > 1 else phi
    m, terms = _mask_terms(p, mask)
    if mask != "sum":  # only rounding can leave [0, 1]
        m = m.clamp_(0.0, 1.0)
    return (expand_segments(m, segment, phi.size(-1)) if segment > 1 else m), p, terms


# devices where a token mask's backward reads the forward's cumulative sums (time over memory)
KEEP_TOKEN_TERMS_ON = ("cpu",)


class _SoftWindowMask(torch.autograd.Function):
    """M from φ̂ = [φ̂_l; φ̂_r]. Segment masks keep their terms (b times smaller than φ̂), as do
    token masks on the CPU, where recomputing them costs a fifth of the mask's time; elsewhere
    (a GPU) token masks save only φ̂ (which the pointer softmax keeps anyway) and recompute the
    cumulative sums in backward instead of holding ~2 extra (B, H, 2, T, S) tensors."""

    @staticmethod
    def forward(ctx, phi, segment: int, mask: str):
        ctx.segment, ctx.mask, ctx.n = segment, mask, phi.size(-1)
        out, p, terms = _mask_forward(phi, segment, mask)
        ctx.kept = segment > 1 or phi.device.type in KEEP_TOKEN_TERMS_ON
        if ctx.kept:
            ctx.save_for_backward(p, *terms)
        else:
            ctx.save_for_backward(phi)
        return out

    @staticmethod
    def backward(ctx, grad):
        p, *terms = ctx.saved_tensors
        terms = tuple(terms) if ctx.kept else None
        if ctx.segment > 1:  # a segment's keys share one value: its gradient is their sum
            d_p = _mask_backward(segment_mass(grad, ctx.segment), p, ctx.mask, terms)
            return expand_segments(d_p, ctx.segment, ctx.n), None, None  # each key of a segment alike
        return _mask_backward(grad, p, ctx.mask, terms), None, None


def window_mask(phi: torch.Tensor, segment: int = 0, mask: str = "exact") -> torch.Tensor:
    """The soft mask M (…, T, S) from both boundary pointers as one tensor φ̂ (…, 2, T, S) =
    [φ̂_l; φ̂_r] on dim −3 (what the pointer modules return); ``soft_window_mask`` of the two."""
    if mask not in MASKS:
        raise ValueError(f"unknown window mask {mask!r} (expected one of {', '.join(MASKS)})")
    if not (phi.requires_grad and torch.is_grad_enabled()):  # a search step: no autograd node
        return _mask_forward(phi, segment, mask)[0]
    return _SoftWindowMask.apply(phi, segment, mask)


def soft_window_mask(phi_l: torch.Tensor, phi_r: torch.Tensor, segment: int = 0, mask: str = "exact") -> torch.Tensor:
    """The soft mask M (…, T, S) from boundary pointers φ̂_l, φ̂_r (…, T, S); in [0, 1] except
    for mask="sum", which reaches 2 where both pointers sit on the same key (segment)."""
    # (…, 1, S) each, stacked as (…, 2, 1, S): any number of leading dimensions, one or more
    return window_mask(torch.stack((phi_l.unsqueeze(-2), phi_r.unsqueeze(-2)), -3), segment, mask).squeeze(-2)


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
    operand_maps = True  # pointer and local maps feed only packed.matmul (their scores' products)

    def __init__(self, name: str = "window-add", options: WindowOptions | None = None):
        super().__init__(name, options or window_options(name))

    @classmethod
    def options_from(cls, cfg, name: str) -> WindowOptions:
        """The flat keys saved runs hold, model.window_*."""
        return window_options(name, cfg.window_segment, cfg.window_mask, cfg.window_renorm,
                              cfg.window_temperature, cfg.window_pointers)

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

    def scores(self, attn, q, keys, ctx):
        if self.options.pointers != "attention" or self.options.mask == "full":
            return super().scores(attn, q, keys, ctx)
        scores, ctx["pointer_scores"] = attn.pointers.with_scores(q, keys["k"])
        return scores * attn.scale

    def soft_mask(self, phi: torch.Tensor) -> torch.Tensor:
        """M (B, H, T, S) from the pointers φ̂ (B, H, 2, T, S): ``window_mask`` with this variant's options."""
        return window_mask(phi, self.options.segment, self.options.mask)

    def weights(self, attn, scores, q, x, keys, allowed, internals, given=None, ctx=None):
        w = self.options
        if w.mask == "full":  # ablation: the combiner with M ≡ 1, no window (pointers unused)
            mask = torch.ones_like(scores)
        else:
            if w.pointers == "input":
                queries = attn.pointers.split(mapped(attn.pointers.query, x, given, "pq"))
                phi = attn.pointers(queries, keys["pk"], allowed)  # (B, H, 2, T, S)
            else:
                phi = attn.pointers(q, keys["k"], allowed, (ctx or {}).get("pointer_scores"))
            mask = self.soft_mask(phi)
            if internals is not None:
                phi_l, phi_r = phi.unbind(-3)
                internals.update(mask=mask, phi_l=phi_l, phi_r=phi_r)
        if w.combine == "mul":
            return combine_multiplicative(scores, mask, allowed, w.renorm)
        local_q = attn._split(mapped(attn.local_q, x, given, "lq"))  # Q_L
        local = packed.matmul(local_q, keys["lk"].transpose(-1, -2)) * attn.scale
        return combine_additive(scores, local, mask, allowed)


register(Window)
