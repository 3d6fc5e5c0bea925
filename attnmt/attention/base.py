"""The attention interface every RNN-decoder attention module implements.

A decoder calls, once per source batch::

    memory = attention.prepare(values, mask)          # values h̄_s: (B, S, d), mask: (B, S) bool

and then, for a block of T target steps (T = all steps when teacher forcing without input
feeding, T = 1 in a step-by-step loop)::

    context, weights = attention(query, memory, positions, need_weights)
        # query h_t: (B, T, d); positions: (T,) absolute target indices t (used by local-m)
        # context c_t: (B, T, d); weights a_t: (B, T, S) dense, or None when not needed

``prepare`` is where score-specific work that depends only on the source is done once (for
`general`, W_a h̄_s; for `concat`, the source half of W_a[h_t; h̄_s]); beam search re-indexes a
``Memory`` with ``memory.select(index)``. A new attention type is a module with these two methods.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import torch


@dataclass
class Memory:
    """Encoder states prepared for attention. Every tensor has the batch on dimension 0.

    ``rows``: query rows per entry. Beam search asks for every entry to be repeated for the K
    hypotheses of its sentence (``repeat_rows``); an attention that sets ``shareable`` in
    ``prepare`` reads entry r // rows for query row r instead, so the states are neither copied
    nor read K times per step. Others get the repeated copy."""

    values: torch.Tensor  # h̄_s: (B, S, d)
    keys: torch.Tensor  # score-specific projection of h̄_s: (B, S, d_k)
    mask: torch.Tensor  # (B, S) bool, True on real source tokens
    lengths: torch.Tensor  # (B,) long, number of real source tokens
    rows: int = 1
    shareable: bool = False

    def _tensors(self, fn, given: dict[str, torch.Tensor] | None = None) -> dict:
        """fn of every tensor field (or ``given[name]``, where given names it); a tensor held by
        two fields (keys = values) is mapped once, so the result holds one tensor there too."""
        done: dict[int, torch.Tensor] = {}
        out = {}
        for f in fields(self):
            if f.name in ("rows", "shareable"):
                continue
            if given and f.name in given:
                out[f.name] = given[f.name]
                continue
            t = getattr(self, f.name)
            out[f.name] = done[id(t)] if id(t) in done else done.setdefault(id(t), fn(t))
        return out

    def select(self, index: torch.Tensor) -> "Memory":
        """The memory of query rows ``index`` (e.g. repeated per beam hypothesis). With shared
        entries, whole aligned blocks of ``rows`` rows keep their entry shared."""
        if self.rows > 1:
            blocks = index.view(-1, self.rows) if index.numel() % self.rows == 0 else None
            aligned = blocks is not None and bool(
                (blocks == blocks[:, :1] + torch.arange(self.rows, device=index.device)).all()
                and (blocks[:, 0] % self.rows == 0).all()
            )
            if aligned:
                return self._select_entries(blocks[:, 0] // self.rows, self.rows, True)
            return self._select_entries(index // self.rows, 1, True)
        return self._select_entries(index, 1, self.shareable)

    def _select_entries(self, entries: torch.Tensor, rows: int, shareable: bool) -> "Memory":
        """The memory of entries ``entries`` (E',), read by ``rows`` query rows each.

        A cached value with a ``select_entries(memory, entries)`` method is carried over: it
        returns (its value for the selected entries, the fields of the new memory it holds as
        views, e.g. {"values": ...}; those are not index_selected again). Other cached values
        are dropped (built again on first use), as what they hold may depend on the entries."""
        carried, given = {}, {}
        for key, value in self.__dict__.get("_cache", {}).items():
            select = getattr(value, "select_entries", None)
            if select is not None:
                carried[key], held = select(self, entries)
                given.update(held)
        out = Memory(**self._tensors(lambda t: t.index_select(0, entries), given), rows=rows,
                     shareable=shareable)
        if carried:
            out.__dict__["_cache"] = carried
        return out

    def repeat_rows(self, k: int) -> "Memory":
        """Every query row repeated k times: shared if the attention can read shared entries."""
        if self.shareable:  # the same tensors: what was derived from them still holds
            out = Memory(**self._tensors(lambda t: t), rows=self.rows * k, shareable=True)
            out.__dict__["_cache"] = dict(self.__dict__.get("_cache", {}))
            return out
        return Memory(**self._tensors(lambda t: t.repeat_interleave(k, dim=0)))

    def cached(self, key, build: Callable[["Memory"], Any]) -> Any:
        """``build(self)``, computed once per Memory object: source-only work an attention
        module derives on first use (a ``select``-ed memory starts without it unless it can
        select itself, see ``_select_entries``; ``repeat_rows`` keeps it, so a key must name
        ``rows`` if what it holds depends on them)."""
        cache = self.__dict__.setdefault("_cache", {})
        if key not in cache:
            cache[key] = build(self)
        return cache[key]


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax over the last dim of scores (B, T, S), with positions where mask (B, S) is False
    receiving exactly zero weight."""
    scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
    return torch.softmax(scores, dim=-1)
