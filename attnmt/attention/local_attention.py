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

Cost. Only the window's 2D+1 encoder states are read for each target step, so a block of T steps
costs O(T·D·d) time, whatever the source length S; the full T×S score matrix is never formed.

Training (autograd on): per memory (``Memory.cached``), two small tables over the source positions
padded by D on each side give, for the window slot j of a centre, the memory row to read (clamped
into the sentence) and an additive mask (0 inside the sentence, −inf outside). For dot and general
the two window products (scores h_tᵀ h̄_s and the context Σ a_t(s) h̄_s) are autograd functions
(kernels/window_products.py) that gather the window rows in bounded chunks and gather them again
in backward instead of keeping a (T, 2D+1, d) copy of the windows: training memory is
O(T·(D + d)) on top of the encoder states (and their gradient). concat and concat-simple need the tanh(W h_t + W' h̄_s) window tensor, O(T·D·d),
for backward anyway. `general` is computed as (W_aᵀ h_t)ᵀ h̄_s (its ``query_side``), so the memory
holds no projected copy of the source (`concat` still precomputes W' h̄_s once per sentence).

Decoding (autograd off) has its own path over zero-padded copies of the states, in
kernels/local_decoding.py, with its cost notes (``prepare`` and ``forward`` call it).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attnmt.attention.base import Memory
from attnmt.attention.global_attention import build_score
from attnmt.kernels import local_decoding
from attnmt.kernels.dispatch import choose
from attnmt.kernels.window_products import StepLinear, WindowDot, WindowSum, gather_windows

MODES = ("local-m", "local-p")
COMPOSITIONS = ("paper", "inside")


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
        self.score = build_score(score, query_dim, memory_dim, content=True)  # rejects "location"
        # one product h_tᵀ·keys (dot, general), read at every decoding step (a submodule's
        # attribute costs a Module.__getattr__)
        self.score_is_dot = self.score.dot
        if mode == "local-p":
            self.W_p = nn.Linear(query_dim, query_dim, bias=False)
            self.v_p = nn.Linear(query_dim, 1, bias=False)
        # window offsets −D..D; not persistent, so checkpoints hold parameters only
        self.register_buffer("offsets", torch.arange(-window, window + 1), persistent=False)

    @property
    def gaussian(self) -> bool:
        return math.isfinite(self.sigma)

    def prepare(self, values: torch.Tensor, mask: torch.Tensor) -> Memory:
        # values (B, S, d), mask (B, S). In training `general` keeps keys = values: h_tᵀ W_a h̄_s
        # is computed as (W_aᵀ h_t)ᵀ h̄_s, which costs O(T·d²) per block instead of O(S·d²) per
        # sentence and keeps no second S-long tensor (nor its gradient); `concat` still needs
        # W_memory h̄_s for every s.
        lengths = mask.sum(1)
        if torch.is_grad_enabled() or choose("attention search", self)[0] is None:  # the training path's
            keys = values if self.score.query_side else self.score.keys(values)
            # shareable: beam hypotheses read their sentence's entry (see Memory), never a copy
            return Memory(values=values, keys=keys, mask=mask, lengths=lengths, shareable=True)
        return local_decoding.prepare(self, values, mask, lengths, Memory)  # the decoding kernel's tables

    def aligned_positions(
        self, query: torch.Tensor, memory: Memory, positions: torch.Tensor | None
    ) -> torch.Tensor:
        """p_t (B, T): min(t, S−1) for local-m (long), S·sigmoid(v_pᵀ tanh(W_p h_t)) for local-p
        (float32 even under autocast: at S = 16000 half precision cannot tell positions apart)."""
        if self.mode == "local-m":
            return self._monotonic(query, memory, positions)
        return self._predicted(self.W_p(query), memory)

    def _monotonic(self, query, memory: Memory, positions) -> torch.Tensor:
        """local-m's p_t = min(t, S_x − 1) (B, T)."""
        B, T, _ = query.shape
        if positions is None:
            positions = torch.arange(T, device=query.device)
        return torch.minimum(positions.view(1, T), self._window_tables(memory)["last"])

    def _predicted(self, projected: torch.Tensor, memory: Memory) -> torch.Tensor:
        """local-p's p_t from W_p h_t (B, T, d)."""
        logit = self.v_p(torch.tanh(projected)).squeeze(-1)  # v_pᵀ tanh(W_p h_t): (B, T)
        return self._window_tables(memory)["length"] * torch.sigmoid(logit.float())

    def _query_weights(self, keys_projected: bool) -> list[torch.Tensor]:
        """The weights of the per-step products of the query: W_aᵀ (general, unless the keys
        are W_a h̄_s already), W_p (local-p); as F.linear weights (out, in)."""
        weights = []
        if self.score.query_side and not keys_projected:
            weights.append(self.score.query_weight())
        if self.mode == "local-p":
            weights.append(self.W_p.weight)
        return weights

    def _queries(
        self, query: torch.Tensor, keys_projected: bool, steps: dict | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the query the window scores use, W_p h_t or None). For `general` the score's query is
        W_aᵀ h_t, unless the keys it meets are W_a h̄_s already (decoding). In a loop of steps
        (``steps``), both are one StepLinear of the stacked weights."""
        stacked = steps and steps["stacked"]
        if stacked is not None:
            B, T, d = query.shape
            y = StepLinear.apply(query.reshape(B * T, d), stacked, steps["projection"])
            y = y.view(B, T, -1)
            general = self.score.query_side and not keys_projected
            n = self.score.query_weight().size(0) if general else 0
            score_query = y[..., :n] if general else query
            return score_query, (y[..., n:] if self.mode == "local-p" else None)
        if self.score.query_side and not keys_projected:
            score_query = self.score.query_map(query)
        else:
            score_query = query
        if self.mode != "local-p":
            return score_query, None
        return score_query, F.linear(query, self.W_p.weight)  # W_p h_t (no Module call per step)

    def _window_tables(self, memory: Memory) -> dict[str, torch.Tensor]:
        """Per memory, once: over the source positions padded by D on each side (index j is
        position j − D), the row of the flattened (E·S, d) memory to read for it (clamped into
        the sentence) and the additive mask (0 inside the sentence, −inf outside); per query row
        (entry r // memory.rows of E entries), where its window slots start in those tables."""

        def build(memory: Memory) -> dict[str, torch.Tensor]:
            E, S = memory.mask.shape
            D, k = self.window, memory.rows
            device = memory.values.device
            last = (memory.lengths - 1).view(E, 1)
            position = torch.arange(-D, S + D, device=device).view(1, -1)  # (1, S + 2D)
            inside = (position >= 0) & (position <= last)
            entry_rows = torch.arange(E, device=device).view(E, 1) * S
            rows = entry_rows + torch.minimum(position.clamp(min=0), last)
            bias = torch.zeros(E, S + 2 * D, device=device).masked_fill_(~inside, float("-inf"))
            # slot w of the window centred at c for query row r: flat index e(S+2D) + c + w
            entry = torch.arange(E * k, device=device) // k  # (R,) the entry of each query row
            slots = entry.view(-1, 1) * (S + 2 * D) + torch.arange(2 * D + 1, device=device)
            return {"rows": rows.view(-1), "bias": bias.view(-1), "slots": slots,
                    "last": last[entry], "entry_rows": entry_rows[entry],
                    "length": memory.lengths[entry].view(-1, 1).float()}

        return memory.cached(("local", self.window, memory.rows), build)

    def forward(
        self,
        query: torch.Tensor,
        memory: Memory,
        positions: torch.Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # query h_t: (B, T, d); positions: (T,) absolute target indices. B query rows read
        # E = B / memory.rows memory entries (beam hypotheses share their sentence's).
        if not torch.is_grad_enabled():
            kernel, _ = choose("attention search", self)
            if kernel is not None:  # local_decoding.decode, read from its module (tests swap it)
                return local_decoding.decode(self, query, memory, positions, need_weights)
        return self._train(query, memory, positions, need_weights)

    def _train(
        self, query: torch.Tensor, memory: Memory, positions: torch.Tensor | None,
        need_weights: bool, steps: dict | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``forward`` with autograd; ``steps``: see kernels/attention_steps.local_steps."""
        B, T, _ = query.shape
        E, S = memory.mask.shape
        tables = self._window_tables(memory)
        # keys = W_a h̄_s already when the memory was prepared for decoding
        score_query, projected = self._queries(query, memory.keys is not memory.values, steps)
        if self.mode == "local-m":
            p = centre = self._monotonic(query, memory, positions)  # (B, T)
        else:
            p = self._predicted(projected, memory)  # (B, T), float32
            centre = torch.minimum(p.detach().long(), tables["last"])
        flat = (tables["slots"].unsqueeze(1) + centre.unsqueeze(-1)).view(B * T, -1)
        rows = tables["rows"].take(flat)  # (B·T, W) rows of the flattened memory, in the sentence
        mask = tables["bias"].take(flat)  # 0, or −inf for window slots outside the sentence
        values = memory.values.reshape(E * S, -1)  # (E·S, d)

        if self.score_is_dot:
            keys = memory.keys.reshape(E * S, -1)
            scores = WindowDot.apply(score_query.reshape(B * T, -1), keys, rows,
                                     steps and steps["scores"])
        else:  # concat: the tanh window tensor is needed for backward anyway
            keys = gather_windows(memory.keys.reshape(E * S, -1), rows)  # (B·T, W, d_k)
            scores = self.score(query, keys.view(B, T, *keys.shape[1:]))
        scores = scores.reshape(B, T, -1).float() + mask.view(B, T, -1)  # (B, T, W)
        if self.gaussian:  # log of exp(−(s − p_t)² / 2σ²), s the (unclamped) window position
            index = centre.unsqueeze(-1) + self.offsets
            log_gauss = (index - p.unsqueeze(-1)).square() * (-0.5 / self.sigma**2)
            if self.composition == "inside":
                scores = scores + log_gauss
        weights = torch.softmax(scores, dim=-1)  # (B, T, W)
        if self.gaussian and self.composition == "paper":
            weights = weights * log_gauss.exp()  # eq. 10

        a = weights.to(values.dtype).view(B * T, -1)  # c_t = Σ_s a_t(s) h̄_s:
        context = WindowSum.apply(a, values, rows, steps and steps["context"]).view(B, T, -1)
        if not need_weights:
            return context, None
        # back to absolute source positions; add (not overwrite): clamped slots repeat an index,
        # and they carry weight 0
        positions_in = rows.view(B, T, -1) - tables["entry_rows"].view(B, 1, 1)
        dense = weights.new_zeros(B, T, S).scatter_add_(2, positions_in, weights)
        return context, dense
