"""Global attention (Luong et al. 2015, section 3.1).

At every target step t the decoder's top hidden state h_t attends to all source states h̄_s:

    a_t(s) = align(h_t, h̄_s) = exp(score(h_t, h̄_s)) / Σ_s' exp(score(h_t, h̄_s'))      (eq. 7)
    c_t    = Σ_s a_t(s) h̄_s

with one of these score functions (eq. 8 and the location variant), each a class registered by
its name (``register_score``: a new score is one class)::

    dot             score = h_tᵀ h̄_s
    general         score = h_tᵀ W_a h̄_s
    concat          score = v_aᵀ tanh(W_a [h_t; h̄_s])
    concat-simple   score = v_aᵀ tanh(W_q h_t + h̄_s)   (the paper's implementation: the h̄_s half
                                                       of W_a fixed to the identity)
    location        a_t   = softmax(W_a h_t)           (over positions 0..max_src_len-1, masked to S)
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from attnmt.attention.base import Memory, masked_softmax
from attnmt.kernels.dispatch import choose


class ScoreFunction(nn.Module):
    """score(h_t, h̄_s) for every (t, s) pair: one class per score, registered by its ``name``
    (``register_score``; the built-ins below). The attentions and their kernels ask a score what
    they need to know, never its name:

        content       a function of h_t and h̄_s (local attention takes content scores only)
        dot           score = h_tᵀ k_s with k = keys(h̄): one product with the memory
        dot_bias      score = h_tᵀ k_s + b_s (``dot_form``): the fused decoder loop's form
        shareable     one memory entry serves several query rows (``Memory.rows``)
        query_side    the keys may stay h̄_s, the score's map moving to the query (``query_map``)
        limits_source it covers the first ``max_src_len`` source positions only (longer sources
                      are cut: ``LSTMConfig.source_limit``)
    """

    name = ""
    content = True
    dot = False
    dot_bias = False
    shareable = True
    query_side = False
    limits_source = False
    attention_parameters = False  # its maps are the attention's own (saved runs name them so)

    def __init__(self, query_dim: int, memory_dim: int, max_src_len: int = 100):
        super().__init__()

    def keys(self, values: torch.Tensor) -> torch.Tensor:
        """The part of the score that depends only on the source, computed once. (B,S,d)->(B,S,d_k)"""
        return values

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """query (B, T, d), keys (B, S, d_k) -> scores (B, T, S).

        A content score's ``keys`` may also be per-step windows (B, T, W, d_k) for local
        attention -> (B, T, W)."""
        raise NotImplementedError

    def dot_form(self, keys: torch.Tensor, S: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Keys k (B, S, d) and bias b (B, 1, S) or None (0) with score(h_t, s) = h_tᵀ k_s + b_s
        (a ``dot_bias`` score)."""
        raise ValueError(f"the {self.name} score is not a dot product")

    def query_weight(self) -> torch.Tensor:
        """A ``query_side`` score's map of the query as an F.linear weight (d_k, query_dim)."""
        raise NotImplementedError(f"the {self.name} score has no query-side map")

    def query_map(self, query: torch.Tensor) -> torch.Tensor:
        """A ``query_side`` score's query, whose product with h̄_s is the score."""
        raise NotImplementedError(f"the {self.name} score has no query-side map")


class _Product(ScoreFunction):
    """h_tᵀ k_s: one product of the query with the keys."""

    dot = dot_bias = True

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        if keys.dim() == 4:  # windows: (B,T,1,d) · (B,T,W,d) -> (B,T,W)
            return (keys @ query.unsqueeze(-1)).squeeze(-1)
        return query @ keys.transpose(1, 2)  # (B,T,d) @ (B,d,S) -> (B,T,S)

    def dot_form(self, keys: torch.Tensor, S: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        return keys, None


class Dot(_Product):
    """score = h_tᵀ h̄_s"""

    name = "dot"

    def __init__(self, query_dim: int, memory_dim: int, max_src_len: int = 100):
        super().__init__(query_dim, memory_dim)
        if query_dim != memory_dim:
            raise ValueError("dot score needs equal query and memory sizes")


class General(_Product):
    """score = h_tᵀ W_a h̄_s: keys W_a h̄_s, or (``query_side``) the query W_aᵀ h_t against h̄_s."""

    name = "general"
    query_side = True

    def __init__(self, query_dim: int, memory_dim: int, max_src_len: int = 100):
        super().__init__(query_dim, memory_dim)
        self.W_a = nn.Linear(memory_dim, query_dim, bias=False)

    def keys(self, values: torch.Tensor) -> torch.Tensor:
        return self.W_a(values)  # W_a h̄_s

    def query_weight(self) -> torch.Tensor:
        """W_aᵀ as an F.linear weight (memory_dim, query_dim): query_map(h) = F.linear(h, it)."""
        return self.W_a.weight.t()

    def query_map(self, query: torch.Tensor) -> torch.Tensor:
        """W_aᵀ h_t (…, memory_dim): its product with h̄_s is the score."""
        return query @ self.W_a.weight


class _Additive(ScoreFunction):
    """v_aᵀ tanh(W_q h_t + k_s): the tanh window tensor is needed for backward anyway."""

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        q = self.W_query(query)  # (B, T, d_k)
        if keys.dim() == 4:  # windows
            hidden = torch.tanh(q.unsqueeze(2) + keys)  # (B, T, W, d_k)
        else:
            hidden = torch.tanh(q.unsqueeze(2) + keys.unsqueeze(1))  # (B, T, S, d_k)
        return self.v_a(hidden).squeeze(-1)


class Concat(_Additive):
    """score = v_aᵀ tanh(W_a [h_t; h̄_s]) = v_aᵀ tanh(W_query h_t + W_memory h̄_s)"""

    name = "concat"
    shareable = False

    def __init__(self, query_dim: int, memory_dim: int, max_src_len: int = 100):
        super().__init__(query_dim, memory_dim)
        self.W_query = nn.Linear(query_dim, query_dim, bias=False)  # h_t half of W_a
        self.W_memory = nn.Linear(memory_dim, query_dim, bias=False)  # h̄_s half of W_a
        self.v_a = nn.Linear(query_dim, 1, bias=False)

    def keys(self, values: torch.Tensor) -> torch.Tensor:
        return self.W_memory(values)


class ConcatSimple(_Additive):
    """score = v_aᵀ tanh(W_q h_t + h̄_s) (the paper's implementation)"""

    name = "concat-simple"

    def __init__(self, query_dim: int, memory_dim: int, max_src_len: int = 100):
        super().__init__(query_dim, memory_dim)
        if query_dim != memory_dim:
            raise ValueError("concat-simple needs equal query and memory sizes")
        self.W_query = nn.Linear(query_dim, memory_dim, bias=False)
        self.v_a = nn.Linear(memory_dim, 1, bias=False)


class Location(ScoreFunction):
    """a_t = softmax(W_a h_t) over positions 0..max_src_len−1, masked to S: a score of h_t alone,
    the rows of W_a its keys (``dot_form``)."""

    name = "location"
    content = False
    dot_bias = True
    limits_source = True
    attention_parameters = True  # W_a: saved runs hold it as the attention's own

    def __init__(self, query_dim: int, memory_dim: int, max_src_len: int = 100):
        super().__init__(query_dim, memory_dim)
        self.max_src_len = max_src_len
        self.W_a = nn.Linear(query_dim, max_src_len)

    def check_length(self, S: int) -> None:
        if S > self.max_src_len:
            raise ValueError(
                f"source length {S} exceeds the location score's max_src_len {self.max_src_len}"
            )

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        S = keys.size(1)
        self.check_length(S)
        return self.W_a(query)[..., :S]  # W_a h_t: (B, T, S)

    def dot_form(self, keys: torch.Tensor, S: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        self.check_length(S)
        B = keys.size(0)
        return self.W_a.weight[:S].unsqueeze(0).expand(B, S, -1), self.W_a.bias[:S].expand(B, 1, S)


# the scores by name: ``register_score`` adds one (model.score then accepts it)
_SCORES: dict[str, type[ScoreFunction]] = {}


def register_score(unit: type[ScoreFunction]) -> type[ScoreFunction]:
    """Make ``unit.name`` a value of ``model.score`` (global attention; local attention too for a
    ``content`` score). The same name from another class is refused. Returns ``unit``."""
    if not (isinstance(unit, type) and issubclass(unit, ScoreFunction)) or not unit.name:
        raise TypeError(f"{unit!r} is not a named subclass of attnmt.attention.global_attention.ScoreFunction")
    taken = _SCORES.get(unit.name)
    if taken is not None and taken.__qualname__ != unit.__qualname__:
        raise ValueError(f"score {unit.name!r} is registered by {taken.__module__}.{taken.__qualname__}")
    _SCORES[unit.name] = unit
    return unit


for _unit in (Dot, General, Concat, ConcatSimple, Location):
    register_score(_unit)
SCORES = tuple(_SCORES)  # the built-ins; ``score_names()`` has the registered ones too


def score_names() -> tuple[str, ...]:
    """Every registered score name (the values of ``model.score``)."""
    return tuple(_SCORES)


def score_class(name: str) -> type[ScoreFunction] | None:
    """The class of the score ``name`` (None: no such score)."""
    return _SCORES.get(name)


def build_score(name: str, query_dim: int, memory_dim: int, max_src_len: int = 100,
                content: bool = False) -> ScoreFunction:
    """The score ``name`` (``content``: a content score only, as local attention needs)."""
    unit = _SCORES.get(name)
    if unit is None or (content and not unit.content):
        names = [n for n, u in _SCORES.items() if u.content or not content]
        raise ValueError(f"unknown {'content ' if content else ''}score {name!r}; choose from {tuple(names)}")
    return unit(query_dim, memory_dim, max_src_len)


class GlobalAttention(nn.Module):
    """Attend to every source position; see the module docstring for the equations."""

    def __init__(self, score: str, query_dim: int, memory_dim: int, max_src_len: int = 100):
        super().__init__()
        unit = build_score(score, query_dim, memory_dim, max_src_len)
        if unit.attention_parameters:  # its maps registered here, under the names saved runs hold
            for name, child in unit.named_children():
                self.add_module(name, child)
            object.__setattr__(self, "score", unit)  # not a submodule: its maps are registered above
        else:
            self.score = unit

    @property
    def score_kind(self) -> str:
        return self.score.name

    def dot_scores(self, memory: Memory) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys k (B, S, d) and bias b (B, 1, S) with score(h_t, s) + mask = h_tᵀ k_s + b_s, for
        a decoder that fuses its step loop (kernels/fused_rnn.py): dot and general read
        memory.keys (h̄_s or W_a h̄_s) with b = 0; location reads the rows of W_a for positions
        0..S−1 with their biases (W_a h_t = h_tᵀ W_a[s] + b_a[s]). b = −inf outside the sentence."""
        B, S = memory.mask.shape
        outside = ~memory.mask.unsqueeze(1)  # (B, 1, S)
        keys, bias = self.score.dot_form(memory.keys, S)
        if bias is not None:
            return keys, bias.masked_fill(outside, float("-inf"))
        return keys, memory.keys.new_zeros(B, 1, S).masked_fill_(outside, float("-inf"))

    def prepare(self, values: torch.Tensor, mask: torch.Tensor) -> Memory:
        # a shareable score's entry serves several query rows (see forward)
        return Memory(values=values, keys=self.score.keys(values), mask=mask, lengths=mask.sum(1),
                      shareable=self.score.shareable)

    def forward(
        self,
        query: torch.Tensor,
        memory: Memory,
        positions: torch.Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not torch.is_grad_enabled():
            kernel, _ = choose("attention search", self)  # dot and general: the search's kernel
            if kernel is not None:
                return kernel.run(self, query, memory)
        if memory.rows > 1:  # query rows r·k .. r·k+k-1 read entry r: one product per entry
            R, T, d = query.shape
            entry_query = query.reshape(R // memory.rows, memory.rows * T, d)
            context, weights = self(entry_query, replace(memory, rows=1), positions, need_weights)
            return context.reshape(R, T, -1), weights.reshape(R, T, -1)
        scores = self.score(query, memory.keys)  # (B, T, S)
        weights = masked_softmax(scores, memory.mask)  # a_t: (B, T, S)
        context = weights @ memory.values  # c_t = Σ_s a_t(s) h̄_s: (B, T, d)
        return context, weights
