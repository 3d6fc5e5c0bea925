"""Sampling instead of search (``translate --sample topk=K|topp=P --temperature T --seed S``).

Back-translation wants varied outputs, not the most likely ones. Each step draws

    y_t ~ softmax(log p(· | y_<t, x) / T)   restricted to the K most likely tokens (top-k)
                                            or to the fewest whose probability reaches P (top-p)

from the step's log-probabilities, after the search's own masks (<pad>, <s>, a forced prefix:
decode/prefix.py), so a forced token is drawn with certainty. Sentences of a batch are drawn
together, one ``torch.multinomial`` per step from a ``torch.Generator``: the same seed, input and
batch size give the same outputs on a device. topk=1 keeps only the most likely token and is
greedy search. The score of a sample is the model's own log p(y|x) / |y| (temperature 1,
unfiltered), as greedy search reports it.
"""

from __future__ import annotations

import torch

from attnmt.decode.prefix import ForcedPrefix
from attnmt.decode.search import Hypothesis, greedy_search


class Sampler:
    """``sampler(logp)``: one token per row of the step's (R, V) log-probabilities."""

    def __init__(self, kind: str, value: float, temperature: float, generator: torch.Generator):
        self.kind, self.value, self.temperature, self.generator = kind, value, temperature, generator

    def __call__(self, logp: torch.Tensor) -> torch.Tensor:
        scaled = logp / self.temperature  # -inf (blocked tokens) stays -inf
        if self.kind == "topk":
            k = min(int(self.value), scaled.size(1))
            kth = scaled.topk(k, dim=1).values[:, -1:]  # (R, 1): the k-th largest
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        else:  # nucleus: keep a token while the mass of the tokens before it is still below P
            probs, order = torch.softmax(scaled, dim=1).sort(dim=1, descending=True)
            before = probs.cumsum(1) - probs
            drop = torch.zeros_like(scaled, dtype=torch.bool).scatter_(1, order, before >= self.value)
            scaled = scaled.masked_fill(drop, float("-inf"))
        probs = torch.softmax(scaled, dim=1)
        return torch.multinomial(probs, 1, generator=self.generator).squeeze(1)


def chunk_generator(seed: int, first_line: int, device: torch.device) -> torch.Generator:
    """The generator of the batch whose first line (in the input) is ``first_line``: batches draw
    independently of the order in which threads search them."""
    mixed = (seed * 0x9E3779B97F4A7C15 + first_line + 1) % (2**63)
    return torch.Generator(device=device).manual_seed(mixed)


@torch.no_grad()
def sample(
    model,
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    sampler: Sampler,
    max_len_ratio: float = 2.0,
    max_len_extra: int = 10,
    max_len_cap: int = 512,
    need_weights: bool = False,
    forced: ForcedPrefix | None = None,
) -> list[list[Hypothesis]]:
    """One sampled output per sentence (greedy search's loop with ``sampler`` choosing)."""
    return greedy_search(model, src, src_lengths, max_len_ratio, max_len_extra, max_len_cap,
                         need_weights, forced=forced, choose=sampler)
