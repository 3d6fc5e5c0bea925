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

Cost. Only the window's 2D+1 encoder states are gathered for each target step (indices clamped
into range, out-of-range or padded slots masked), so a block of T steps costs O(T·D·d) time and
memory, whatever the source length S; the full T×S score matrix is never formed. `general` is
computed as (W_aᵀ h_t)ᵀ h̄_s, so the memory holds no projected copy of the source either (`concat`
still precomputes W h̄_s once per sentence). The dense (B, T, S) weights are built by scattering
the window weights back, and only when asked for (need_weights=True).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnmt.attention.base import Memory
from attnmt.attention.global_attention import ScoreFunction

MODES = ("local-m", "local-p")
COMPOSITIONS = ("paper", "inside")


def gather_windows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows ``index`` of every batch item: x (B, S, d), index (B, T, W) in [0, S) -> (B, T, W, d)."""
    B, T, W = index.shape
    flat = index.reshape(B, T * W, 1).expand(B, T * W, x.size(-1))
    return x.gather(1, flat).view(B, T, W, x.size(-1))


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
        """p_t as float32 (B, T): min(t, S−1) for local-m, S·sigmoid(v_pᵀ tanh(W_p h_t)) for local-p."""
        B, T, _ = query.shape
        lengths = memory.lengths.to(query.device)
        if self.mode == "local-m":
            if positions is None:
                positions = torch.arange(T, device=query.device)
            t = positions.to(query.device).view(1, T).expand(B, T)
            last = (lengths - 1).clamp(min=0).view(B, 1)
            return torch.minimum(t, last).float()
        # float32 even under autocast: at S = 16000 half precision cannot tell positions apart
        logit = self.v_p(torch.tanh(self.W_p(query))).squeeze(-1).float()  # (B, T)
        return lengths.float().view(B, 1) * torch.sigmoid(logit)

    def forward(
        self,
        query: torch.Tensor,
        memory: Memory,
        positions: torch.Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # query h_t: (B, T, d); positions: (T,) absolute target indices
        B, T, _ = query.shape
        S = memory.values.size(1)
        D = self.window
        p = self.aligned_positions(query, memory, positions)  # (B, T) float
        last = (memory.lengths.to(query.device) - 1).clamp(min=0).view(B, 1)
        centre = torch.minimum(p.detach().floor().long(), last)  # (B, T) in [0, S_x − 1]
        offsets = torch.arange(-D, D + 1, device=query.device)  # (W,)
        index = centre.unsqueeze(-1) + offsets  # absolute source positions: (B, T, W)
        clamped = index.clamp(0, S - 1)
        in_mask = memory.mask.gather(1, clamped.view(B, -1)).view(B, T, -1)
        valid = (index >= 0) & (index < S) & in_mask  # (B, T, W)

        values = gather_windows(memory.values, clamped)  # (B, T, W, d)
        keys = values if memory.keys is memory.values else gather_windows(memory.keys, clamped)
        if self.score.kind == "general":
            query = query @ self.score.W_a.weight  # W_aᵀ h_t: (B, T, d)
        scores = self.score(query, keys).float()  # (B, T, W)
        if self.gaussian:
            log_gauss = -((index.float() - p.unsqueeze(-1)) ** 2) / (2 * self.sigma**2)
            if self.composition == "inside":
                scores = scores + log_gauss
        weights = torch.softmax(scores.masked_fill(~valid, float("-inf")), dim=-1)  # (B, T, W)
        if self.gaussian and self.composition == "paper":
            weights = weights * log_gauss.exp()  # eq. 10

        weights = weights.to(values.dtype)
        context = (weights.unsqueeze(-2) @ values).squeeze(-2)  # c_t: (B, T, d)
        if not need_weights:
            return context, None
        # back to absolute source positions; add (not overwrite): clamped slots repeat an index,
        # and they carry weight 0
        dense = weights.new_zeros(B, T, S).scatter_add_(2, clamped, weights)
        return context, dense
