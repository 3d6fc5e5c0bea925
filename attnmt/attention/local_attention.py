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
costs O(T·D·d) time, whatever the source length S; the full T×S score matrix is never formed. The
window bookkeeping is done once per memory, not per step: two small tables over the source
positions padded by D on each side give, for the window slot j of a centre, the memory row to read
(clamped into the sentence) and an additive mask (0 inside the sentence, −inf outside), so a step
finds its window with one addition and two gathers. For dot and general the two window products
(scores h_tᵀ h̄_s and the context Σ a_t(s) h̄_s) gather the window rows in bounded chunks (during
decoding, chunks small enough that a step's temporaries stay well below global attention's B×S
scores); with autograd they are functions that gather the rows again in backward instead of keeping
a (T, 2D+1, d) copy of the windows: training memory is O(T·(D + d)) on top of the encoder states
(and their gradient). concat and concat-simple need the tanh(W h_t + W' h̄_s) window tensor,
O(T·D·d), for backward anyway. `general` is computed as (W_aᵀ h_t)ᵀ h̄_s, so the memory holds no
projected copy of the source (`concat` still precomputes W' h̄_s once per sentence); without
autograd, local-p computes W_aᵀ h_t and W_p h_t with one matrix product. The memory is
shareable: in beam search the K hypotheses of a sentence read its one entry through the window
tables (no K copies of the source states). The dense (B, T, S) weights are built by scattering
the window weights back, and only when asked for (need_weights=True).
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


# temporary gathered window elements (rows × (2D+1) × d) per chunk: 4 MB in float32 with autograd;
# without, the larger of 128 KB and half the B×T×S scores a step of global attention allocates
# (it allocates about three such tensors), so a decoding step's temporaries stay well below
# global attention's and large batches of short sources are not cut into many small products
CHUNK_ELEMENTS = 1 << 20
STEP_CHUNK_ELEMENTS = 1 << 15


def gather_windows(table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """table (N, d), rows (M, W) -> the window rows (M, W, d), materialised."""
    return table.index_select(0, rows.reshape(-1)).view(*rows.shape, table.size(-1))


def _chunk(rows: torch.Tensor, d: int, elements: int) -> int:
    return max(1, elements // max(1, rows.size(1) * d))


def window_dot(x: torch.Tensor, table: torch.Tensor, rows: torch.Tensor,
               elements: int | None = None) -> torch.Tensor:
    """out[m, w] = x[m] · table[rows[m, w]]: x (M, d), table (N, d), rows (M, W) -> (M, W)."""
    step = _chunk(rows, table.size(1), CHUNK_ELEMENTS if elements is None else elements)
    # (M, W, d) @ (M, d, 1): the windows are the only temporary (a multiply-and-sum would
    # allocate their product too)
    parts = [
        torch.bmm(gather_windows(table, rows[i : i + step]), x[i : i + step].unsqueeze(-1))
        .squeeze(-1)
        for i in range(0, rows.size(0), step)
    ]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def window_sum(a: torch.Tensor, table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """out[m] = Σ_w a[m, w] table[rows[m, w]]: a (M, W) -> (M, d), without gathering the rows."""
    return F.embedding_bag(rows, table, per_sample_weights=a.to(table.dtype), mode="sum")


def window_scatter(a: torch.Tensor, x: torch.Tensor, rows: torch.Tensor, N: int) -> torch.Tensor:
    """The transpose of both: out[n] = Σ_{m, w: rows[m, w] = n} a[m, w] x[m] -> (N, d)."""
    out = x.new_zeros(N, x.size(1))
    step = _chunk(rows, x.size(1), CHUNK_ELEMENTS)
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
        # shareable: beam hypotheses read their sentence's entry (see Memory), never a copy
        return Memory(values=values, keys=keys, mask=mask, lengths=mask.sum(1), shareable=True)

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

    def _queries(self, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the query the window scores use, W_p h_t or None). For `general` the score's query is
        W_aᵀ h_t; without autograd, local-p gets it and W_p h_t from one product with the two
        matrices side by side (cached until a weight changes)."""
        general = self.score.kind == "general"
        if self.mode != "local-p":
            return (query @ self.score.W_a.weight if general else query), None
        if not general or torch.is_grad_enabled():
            return (query @ self.score.W_a.weight if general else query), self.W_p(query)
        W_a, W_p = self.score.W_a.weight, self.W_p.weight
        key = (W_a.data_ptr(), W_a._version, W_p.data_ptr(), W_p._version, W_a.dtype)
        cached = getattr(self, "_joint", None)
        if cached is None or cached[0] != key:
            cached = (key, torch.cat([W_a, W_p.t()], dim=1))  # (d_q, d_mem + d_q)
            self._joint = cached
        both = query @ cached[1]
        return both[..., : W_a.size(1)], both[..., W_a.size(1) :]

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
        # query h_t: (B, T, d); positions: (T,) absolute target indices. One decoder step runs
        # this whole function, so it is kept to few, small tensor ops. B query rows read
        # E = B / memory.rows memory entries (beam hypotheses share their sentence's).
        B, T, _ = query.shape
        E, S = memory.mask.shape
        tables = self._window_tables(memory)
        score_query, projected = self._queries(query)
        if self.mode == "local-m":
            p = centre = self._monotonic(query, memory, positions)  # (B, T)
        else:
            p = self._predicted(projected, memory)  # (B, T), float32
            centre = torch.minimum(p.detach().long(), tables["last"])
        flat = (tables["slots"].unsqueeze(1) + centre.unsqueeze(-1)).view(B * T, -1)
        rows = tables["rows"].take(flat)  # (B·T, W) rows of the flattened memory, in the sentence
        mask = tables["bias"].take(flat)  # 0, or −inf for window slots outside the sentence
        values = memory.values.reshape(E * S, -1)  # (E·S, d)

        windows = None  # the gathered window rows, when small enough to keep (decoding)
        grad = torch.is_grad_enabled()
        if self.score.kind in ("dot", "general"):
            keys = memory.keys.reshape(E * S, -1)
            x = score_query.reshape(B * T, -1)
            if grad:
                scores = WindowDot.apply(x, keys, rows)
            elif rows.numel() * keys.size(1) <= max(STEP_CHUNK_ELEMENTS, B * T * S // 2):
                windows = gather_windows(keys, rows)  # (B·T, W, d)
                scores = torch.bmm(windows, x.unsqueeze(-1)).squeeze(-1)
            else:
                scores = window_dot(x, keys, rows, max(STEP_CHUNK_ELEMENTS, B * T * S // 2))
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

        a = weights.to(values.dtype).view(B * T, -1)
        if windows is not None and memory.keys is memory.values:
            context = torch.bmm(a.unsqueeze(1), windows)  # the same rows: no second gather
        elif grad:
            context = WindowSum.apply(a, values, rows)
        else:
            context = window_sum(a, values, rows)  # c_t = Σ_s a_t(s) h̄_s, rows not gathered
        context = context.view(B, T, -1)  # (B, T, d)
        if not need_weights:
            return context, None
        # back to absolute source positions; add (not overwrite): clamped slots repeat an index,
        # and they carry weight 0
        positions_in = rows.view(B, T, -1) - tables["entry_rows"].view(B, 1, 1)
        dense = weights.new_zeros(B, T, S).scatter_add_(2, positions_in, weights)
        return context, dense
