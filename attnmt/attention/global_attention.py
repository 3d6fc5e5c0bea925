"""Global attention (Luong et al. 2015, section 3.1).

At every target step t the decoder's top hidden state h_t attends to all source states h̄_s:

    a_t(s) = align(h_t, h̄_s) = exp(score(h_t, h̄_s)) / Σ_s' exp(score(h_t, h̄_s'))      (eq. 7)
    c_t    = Σ_s a_t(s) h̄_s

with one of four score functions (eq. 8 and the location variant)::

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
from attnmt.kernels import attention_steps

SCORES = ("dot", "general", "concat", "concat-simple", "location")


class ScoreFunction(nn.Module):
    """score(h_t, h̄_s) for every (t, s) pair; content-based scores only (not `location`)."""

    def __init__(self, kind: str, query_dim: int, memory_dim: int):
        super().__init__()
        if kind not in SCORES or kind == "location":
            raise ValueError(f"unknown content score {kind!r}; choose from {SCORES[:-1]}")
        self.kind = kind
        if kind == "dot" and query_dim != memory_dim:
            raise ValueError("dot score needs equal query and memory sizes")
        if kind == "general":
            self.W_a = nn.Linear(memory_dim, query_dim, bias=False)
        elif kind == "concat":
            self.W_query = nn.Linear(query_dim, query_dim, bias=False)  # h_t half of W_a
            self.W_memory = nn.Linear(memory_dim, query_dim, bias=False)  # h̄_s half of W_a
            self.v_a = nn.Linear(query_dim, 1, bias=False)
        elif kind == "concat-simple":
            if query_dim != memory_dim:
                raise ValueError("concat-simple needs equal query and memory sizes")
            self.W_query = nn.Linear(query_dim, memory_dim, bias=False)
            self.v_a = nn.Linear(memory_dim, 1, bias=False)

    def keys(self, values: torch.Tensor) -> torch.Tensor:
        """The part of the score that depends only on the source, computed once. (B,S,d)->(B,S,d_k)"""
        if self.kind == "general":
            return self.W_a(values)  # W_a h̄_s
        if self.kind == "concat":
            return self.W_memory(values)
        return values

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """query (B, T, d), keys (B, S, d_k) -> scores (B, T, S).

        ``keys`` may also be per-step windows (B, T, W, d_k) for local attention -> (B, T, W).
        """
        windowed = keys.dim() == 4
        if self.kind in ("dot", "general"):
            if windowed:  # (B,T,1,d) · (B,T,W,d) -> (B,T,W)
                return (keys @ query.unsqueeze(-1)).squeeze(-1)
            return query @ keys.transpose(1, 2)  # (B,T,d) @ (B,d,S) -> (B,T,S)
        q = self.W_query(query)  # (B, T, d_k)
        if windowed:
            hidden = torch.tanh(q.unsqueeze(2) + keys)  # (B, T, W, d_k)
        else:
            hidden = torch.tanh(q.unsqueeze(2) + keys.unsqueeze(1))  # (B, T, S, d_k)
        return self.v_a(hidden).squeeze(-1)


class GlobalAttention(nn.Module):
    """Attend to every source position; see the module docstring for the equations."""

    def __init__(self, score: str, query_dim: int, memory_dim: int, max_src_len: int = 100):
        super().__init__()
        self.score_kind = score
        if score == "location":
            self.max_src_len = max_src_len
            self.W_a = nn.Linear(query_dim, max_src_len)
        else:
            self.score = ScoreFunction(score, query_dim, memory_dim)

    def dot_scores(self, memory: Memory) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys k (B, S, d) and bias b (B, 1, S) with score(h_t, s) + mask = h_tᵀ k_s + b_s, for
        a decoder that fuses its step loop (kernels/fused_rnn.py): dot and general read
        memory.keys (h̄_s or W_a h̄_s) with b = 0; location reads the rows of W_a for positions
        0..S−1 with their biases (W_a h_t = h_tᵀ W_a[s] + b_a[s]). b = −inf outside the sentence."""
        B, S = memory.mask.shape
        outside = ~memory.mask.unsqueeze(1)  # (B, 1, S)
        if self.score_kind == "location":
            self._check_length(S)
            keys = self.W_a.weight[:S].unsqueeze(0).expand(B, S, -1)
            return keys, self.W_a.bias[:S].expand(B, 1, S).masked_fill(outside, float("-inf"))
        if self.score_kind not in ("dot", "general"):
            raise ValueError(f"the {self.score_kind} score is not a dot product")
        bias = memory.keys.new_zeros(B, 1, S).masked_fill_(outside, float("-inf"))
        return memory.keys, bias

    def _check_length(self, S: int) -> None:
        if S > self.max_src_len:
            raise ValueError(
                f"source length {S} exceeds the location score's max_src_len {self.max_src_len}"
            )

    def prepare(self, values: torch.Tensor, mask: torch.Tensor) -> Memory:
        keys = values if self.score_kind == "location" else self.score.keys(values)
        # every score but concat can read one entry for several query rows (see forward)
        return Memory(values=values, keys=keys, mask=mask, lengths=mask.sum(1),
                      shareable=self.score_kind != "concat")

    def forward(
        self,
        query: torch.Tensor,
        memory: Memory,
        positions: torch.Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not torch.is_grad_enabled() and self.score_kind in ("dot", "general"):
            return attention_steps.global_decode(self, query, memory)  # the search's kernel
        S = memory.values.size(1)
        if memory.rows > 1:  # query rows r·k .. r·k+k-1 read entry r: one product per entry
            R, T, d = query.shape
            entry_query = query.reshape(R // memory.rows, memory.rows * T, d)
            context, weights = self(entry_query, replace(memory, rows=1), positions, need_weights)
            return context.reshape(R, T, -1), weights.reshape(R, T, -1)
        if self.score_kind == "location":
            self._check_length(S)
            scores = self.W_a(query)[..., :S]  # W_a h_t: (B, T, S)
        else:
            scores = self.score(query, memory.keys)  # (B, T, S)
        weights = masked_softmax(scores, memory.mask)  # a_t: (B, T, S)
        context = weights @ memory.values  # c_t = Σ_s a_t(s) h̄_s: (B, T, d)
        return context, weights
