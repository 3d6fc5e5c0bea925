"""Local attention (Luong et al. 2015, section 3.2): attend to a window of 2D+1 source positions.

At target step t the model picks an aligned source position p_t and attends only to the window
[p_t − D, p_t + D] (truncated at the sentence boundaries and at padding):

    local-m   p_t = t                                               (monotonic alignment)
    local-p   p_t = S · sigmoid(v_pᵀ tanh(W_p h_t))                 (eq. 9, S = source length)

    align(h_t, h̄_s) = exp(score(h_t, h̄_s)) / Σ_{s' ∈ window} exp(score(h_t, h̄_s'))   (eq. 7)
    a_t(s) = align(h_t, h̄_s) · exp(−(s − p_t)² / 2σ²)              (eq. 10, σ = D/2)
    c_t    = Σ_{s ∈ window} a_t(s) h̄_s

with any content score of attnmt.attention.global_attention (dot, general, concat, concat-simple).

Choices the paper leaves open, fixed here:

* Positions are 0-based: source positions s = 0..S−1, target steps t = 0, 1, ...
* local-m uses eq. 7 inside the window with no Gaussian, as the paper writes it; a Gaussian can be
  switched on with an explicit σ. Its centre is min(t, S−1): once the target runs past the end of
  the source the window stays on the last source words instead of becoming empty.
* local-p's window is centred at the integer floor(p_t) ∈ {0..S−1} (p_t ∈ (0, S)), the Gaussian
  uses the real-valued p_t, so the loss is differentiable in p_t (and W_p, v_p get gradients)
  through the Gaussian only; the choice of window itself is a step function of p_t.
* composition="paper": a_t = softmax_window(score) · Gaussian, as eq. 10 is written (the weights
  then sum to less than 1). composition="inside": the Gaussian multiplies exp(score) inside the
  softmax, i.e. a_t = softmax_window(score − (s − p_t)²/2σ²), a proper distribution.
* σ = inf disables the Gaussian (with D ≥ S this is exactly global attention).

Cost. Only the window's 2D+1 encoder states are read for each target step (indices clamped into
range, out-of-range slots masked), so a block of T steps costs O(T·D·d) time, whatever the source
length S; the full T×S score matrix is never formed. For dot and general the two window products
(scores h_tᵀ h̄_s and the context Σ a_t(s) h̄_s) are autograd functions that gather the window rows
in bounded chunks and gather them again in backward instead of keeping a (T, 2D+1, d) copy of the
windows: training memory is O(T·(D + d)) on top of the encoder states (and their gradient). concat
and concat-simple need the tanh(W h_t + W' h̄_s) window tensor, O(T·D·d), for backward anyway.
`general` is computed as (W_aᵀ h_t)ᵀ h̄_s, so the memory holds no projected copy of the source
(`concat` still precomputes W' h̄_s once per sentence). The dense (B, T, S) weights are built by
scattering the window weights back, and only when asked for (need_weights=True).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from attnmt.attention.base import Memory
from attnmt.attention.global_attention import ScoreFunction

MODES = ("local-m", "local-p")
COMPOSITIONS = ("paper", "inside")


# temporary gathered window elements (rows × (2D+1) × d) per chunk: 4 MB in float32
CHUNK_ELEMENTS = 1 << 20


def window_rows(index: torch.Tensor, S: int) -> torch.Tensor:
    """Per-item positions index (B, T, W) in [0, S) -> rows of the flattened (B·S, d) memory,
    as (B·T, W)."""
    B, T, W = index.shape
    return (index + (torch.arange(B, device=index.device) * S).view(B, 1, 1)).view(B * T, W)


def gather_windows(table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """table (N, d), rows (M, W) -> the window rows (M, W, d), materialised."""
    return table.index_select(0, rows.reshape(-1)).view(*rows.shape, table.size(-1))


def _chunk(rows: torch.Tensor, d: int) -> int:
    return max(1, CHUNK_ELEMENTS // max(1, rows.size(1) * d))


def window_dot(x: torch.Tensor, table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """out[m, w] = x[m] · table[rows[m, w]]: x (M, d), table (N, d), rows (M, W) -> (M, W)."""
    step = _chunk(rows, table.size(1))
    # multiply-and-sum, not M matrix-vector bmm's, which are several times slower on CPU
    parts = [
        (gather_windows(table, rows[i : i + step]) * x[i : i + step].unsqueeze(1)).sum(-1)
        for i in range(0, rows.size(0), step)
    ]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def window_sum(a: torch.Tensor, table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """out[m] = Σ_w a[m, w] table[rows[m, w]]: a (M, W) -> (M, d), without gathering the rows."""
    return F.embedding_bag(rows, table, per_sample_weights=a.to(table.dtype), mode="sum")


def window_scatter(a: torch.Tensor, x: torch.Tensor, rows: torch.Tensor, N: int) -> torch.Tensor:
    """The transpose of both: out[n] = Σ_{m, w: rows[m, w] = n} a[m, w] x[m] -> (N, d)."""
    out = x.new_zeros(N, x.size(1))
    step = _chunk(rows, x.size(1))
    for i in range(0, rows.size(0), step):
        outer = a[i : i + step].unsqueeze(-1).to(x.dtype) * x[i : i + step].unsqueeze(1)
        out.index_add_(0, rows[i : i + step].reshape(-1), outer.reshape(-1, x.size(1)))
    return out


class WindowDot(torch.autograd.Function):
    """window_dot with a backward that re-gathers the windows instead of saving them."""

    @staticmethod
    def forward(ctx, x, table, rows):
        ctx.save_for_backward(x, table, rows)  # x is small, table is the memory itself
        return window_dot(x, table, rows)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, table, rows = ctx.saved_tensors
        need_x, need_table, _ = ctx.needs_input_grad
        grad_x = window_sum(grad, table, rows).to(x.dtype) if need_x else None
        grad_table = window_scatter(grad, x, rows, table.size(0)) if need_table else None
        return grad_x, grad_table, None


class WindowSum(torch.autograd.Function):
    """window_sum with a backward that re-gathers the windows instead of saving them."""

    @staticmethod
    def forward(ctx, a, table, rows):
        ctx.save_for_backward(a, table, rows)
        return window_sum(a, table, rows)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        a, table, rows = ctx.saved_tensors
        need_a, need_table, _ = ctx.needs_input_grad
        grad_a = window_dot(grad.to(table.dtype), table, rows).to(a.dtype) if need_a else None
        grad_table = window_scatter(a, grad, rows, table.size(0)) if need_table else None
        return grad_a, grad_table, None


class LocalAttention(nn.Module):
    """Window attention of width 2D+1 around p_t; see the module docstring for the equations.

    mode: "local-m" | "local-p"; score: a content score; window: D; sigma: the Gaussian's σ
    (None: the paper's default, D/2 for local-p and no Gaussian for local-m; math.inf: none);
    composition: "paper" | "inside".
    """

    def __init__(
        self,
        mode: str,
        score: str,
        query_dim: int,
        memory_dim: int,
        window: int = 10,
        sigma: float | None = None,
        composition: str = "paper",
    ):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"unknown local attention {mode!r}; choose from {MODES}")
        if composition not in COMPOSITIONS:
            raise ValueError(f"unknown local composition {composition!r}; choose {COMPOSITIONS}")
        if window < 0:
            raise ValueError(f"local attention window D must be >= 0, got {window}")
        if sigma is None:
            sigma = window / 2 if mode == "local-p" else math.inf
        if not sigma > 0:
            raise ValueError(f"local attention sigma must be positive, got {sigma} (D={window})")
        self.mode = mode
        self.window = window
        self.sigma = float(sigma)
        self.composition = composition
        self.score = ScoreFunction(score, query_dim, memory_dim)  # rejects "location"
        if mode == "local-p":
            self.W_p = nn.Linear(query_dim, query_dim, bias=False)
            self.v_p = nn.Linear(query_dim, 1, bias=False)
        # window offsets −D..D; not persistent, so checkpoints hold parameters only
        self.register_buffer("offsets", torch.arange(-window, window + 1), persistent=False)

    @property
    def gaussian(self) -> bool:
        return math.isfinite(self.sigma)

    def prepare(self, values: torch.Tensor, mask: torch.Tensor) -> Memory:
        # values (B, S, d), mask (B, S). `general` keeps keys = values: h_tᵀ W_a h̄_s is computed
        # as (W_aᵀ h_t)ᵀ h̄_s, which costs O(T·d²) per block instead of O(S·d²) per sentence and
        # keeps no second S-long tensor; `concat` still needs W_memory h̄_s for every s.
        keys = values if self.score.kind == "general" else self.score.keys(values)
        return Memory(values=values, keys=keys, mask=mask, lengths=mask.sum(1))

    def aligned_positions(
        self, query: torch.Tensor, memory: Memory, positions: torch.Tensor | None
    ) -> torch.Tensor:
        """p_t (B, T): min(t, S−1) for local-m (long), S·sigmoid(v_pᵀ tanh(W_p h_t)) for local-p
        (float32 even under autocast: at S = 16000 half precision cannot tell positions apart)."""
        B, T, _ = query.shape
        if self.mode == "local-m":
            if positions is None:
                positions = torch.arange(T, device=query.device)
            return torch.minimum(positions.view(1, T), memory.lengths.view(B, 1) - 1)
        logit = self.v_p(torch.tanh(self.W_p(query))).squeeze(-1)  # v_pᵀ tanh(W_p h_t): (B, T)
        return memory.lengths.view(B, 1) * torch.sigmoid(logit.float())

    def forward(
        self,
        query: torch.Tensor,
        memory: Memory,
        positions: torch.Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # query h_t: (B, T, d); positions: (T,) absolute target indices. One decoder step runs
        # this whole function, so it is kept to few, small tensor ops.
        B, T, _ = query.shape
        S = memory.values.size(1)
        last = memory.lengths.view(B, 1, 1) - 1  # the last real source position
        p = self.aligned_positions(query, memory, positions)  # (B, T)
        centre = p if self.mode == "local-m" else torch.minimum(p.detach().long(), last[..., 0])
        index = centre.unsqueeze(-1) + self.offsets  # absolute source positions: (B, T, W)
        # truncated at the sentence start, and at its end (padding is always after the end)
        clamped = torch.minimum(index.clamp(min=0), last)
        valid = clamped == index  # (B, T, W)
        rows = window_rows(clamped, S)  # (B·T, W) rows of the flattened memory
        values = memory.values.reshape(B * S, -1)  # (B·S, d)

        if self.score.kind in ("dot", "general"):
            if self.score.kind == "general":
                query = query @ self.score.W_a.weight  # W_aᵀ h_t: (B, T, d)
            keys = memory.keys.reshape(B * S, -1)
            scores = WindowDot.apply(query.reshape(B * T, -1), keys, rows)
        else:  # concat: the tanh window tensor is needed for backward anyway
            keys = gather_windows(memory.keys.reshape(B * S, -1), rows)  # (B·T, W, d_k)
            scores = self.score(query, keys.view(B, T, *keys.shape[1:]))
        scores = scores.view(B, T, -1).float()  # (B, T, W)
        if self.gaussian:  # log of exp(−(s − p_t)² / 2σ²)
            log_gauss = (index - p.unsqueeze(-1)).square() * (-0.5 / self.sigma**2)
            if self.composition == "inside":
                scores = scores + log_gauss
        weights = torch.softmax(scores.masked_fill(~valid, float("-inf")), dim=-1)  # (B, T, W)
        if self.gaussian and self.composition == "paper":
            weights = weights * log_gauss.exp()  # eq. 10

        weights = weights.to(values.dtype)
        context = WindowSum.apply(weights.view(B * T, -1), values, rows)  # c_t = Σ_s a_t(s) h̄_s
        context = context.view(B, T, -1)  # (B, T, d)
        if not need_weights:
            return context, None
        # back to absolute source positions; add (not overwrite): clamped slots repeat an index,
        # and they carry weight 0
        dense = weights.new_zeros(B, T, S).scatter_add_(2, clamped, weights)
        return context, dense
