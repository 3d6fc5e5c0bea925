"""Forced target prefixes (``translate --prefix FILE``): each output starts with given pieces.

A prefix p_1 .. p_P (target ids) forces the first P steps of its sentence: at step t < P every
hypothesis takes p_{t+1}; the other tokens' log-probabilities become -inf and the forced one keeps
its own, so a hypothesis scores log p(p | x) + log p(rest | p, x), as if the model had chosen the
prefix. Beam search then holds one live hypothesis per sentence until the prefix ends and widens
after it. The sentence's length limit is raised to at least P + 1 (the prefix and </s>), so the
prefix is always kept whole. Greedy search, sampling and constrained search take the same mask.

Prefixes come from text, one per input line, through decode/guides.py.
"""

from __future__ import annotations

import torch


class ForcedPrefix:
    """The prefixes of one batch: ``tokens`` (B, P) target ids, -1 past each prefix's end."""

    def __init__(self, prefixes: list[list[int]], device: torch.device):
        self.lengths = [len(p) for p in prefixes]
        self.width = max(self.lengths, default=0)
        tokens = torch.full((len(prefixes), max(self.width, 1)), -1, dtype=torch.long)
        for b, p in enumerate(prefixes):
            tokens[b, : len(p)] = torch.tensor(p, dtype=torch.long)
        self.tokens = tokens.to(device)

    def min_lengths(self) -> list[int]:
        """Per sentence, the fewest output steps that keep its prefix and end it (P + 1)."""
        return [n + 1 for n in self.lengths]

    def apply(self, logp: torch.Tensor, t: int, sentences: torch.Tensor) -> torch.Tensor:
        """``logp`` (R, V) of step ``t`` with each row whose sentence (``sentences``, (R,)) still
        has a prefix token at t restricted to that token."""
        if t >= self.width:
            return logp
        token = self.tokens[sentences, t]  # (R,)
        index = token.clamp(min=0).unsqueeze(1)
        only = torch.full_like(logp, float("-inf")).scatter_(1, index, logp.gather(1, index))
        return torch.where((token >= 0).unsqueeze(1), only, logp)
