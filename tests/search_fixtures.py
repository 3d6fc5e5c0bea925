"""Test helper for the Transformer search's fast paths: padded sources, and a search run with a
model switch off and on (the definition's path, then the fast one)."""

from __future__ import annotations

import torch

from attnmt.data.vocab import PAD


def padded_source(rows: int = 4, seed: int = 1, vocab: int = 30) -> tuple[torch.Tensor, torch.Tensor]:
    """(src (rows, 9), lengths): random ids of lengths 9, 6, 3, 7 (the first ``rows``), padded."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (rows, 9), generator=g)
    lengths = torch.tensor([9, 6, 3, 7][:rows])
    for r, n in enumerate(lengths.tolist()):
        src[r, n:] = PAD
    return src, lengths


def off_and_on(model, switch: str, search, *args, **kw) -> list:
    """``search(model, ...)`` with ``model.<switch>`` False, then True (left True)."""
    out = []
    for on in (False, True):
        setattr(model, switch, on)
        out.append(search(model, *args, **kw))
    setattr(model, switch, True)
    return out
