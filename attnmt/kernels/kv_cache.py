"""The decoder's self-attention keys during a search, in preallocated buffers: the same keys as
the definition's cache, without its copies.

The definition (models/transformer.py, ``Layer.forward``): a layer's state is a dict of the
keys of every earlier position, each (rows, H, t, ·) (K, V and a variant's extra keys, e.g.
window-*'s ``pk``/``lk``), grown by ``torch.cat`` at every step, and a beam search reorders it
(``select_batch``: ``index_select`` of every key) at every step. So a step copies the whole
cache twice per layer.

``KVBuffer`` holds the same keys as views ``[:, :, :t]`` of (rows, H, T_cap, ·) buffers:

    extend(keys)   writes the new positions at t (no copy of the earlier ones) and returns
                   the views the attention reads: equal to torch.cat([cache, keys], dim=2)
    select(index)  one index_select of [:, :, :t] into a second, spare buffer (ping-pong):
                   equal to cache.index_select(0, index); fewer rows too (a beam search dropping
                   finished sentences)
    repeat_rows(k) beam search's K copies of the first step's state

T_cap grows by doubling (amortised: a copy per doubling, not per step). A state is used once,
as every search uses it (step it, or reorder it, then drop it); using an older state again still
gives the right keys: a buffer is written in place only by the newest state that holds it
(``owner``), the spare only when no state holds it (``holders``), else new buffers are made.
"""

from __future__ import annotations

import weakref

import torch

from attnmt.kernels.dispatch import Kernel

# the definition: the self-attention key cache of a Transformer decoder layer (torch.cat per step,
# index_select per beam reorder)
IMPLEMENTS = ("attnmt.models.transformer.Layer",)

FIRST_CAP = 64  # positions allocated at the first step (doubled when a search outgrows them)


class _Buffers:
    """(rows, H, T_cap, ·) tensors by key name, the KVBuffer states reading them, and the spare
    set a reorder writes into."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.tensors = tensors
        self.rows = next(iter(tensors.values())).size(0)
        self.cap = next(iter(tensors.values())).size(2)
        self.owner: KVBuffer | None = None  # the state allowed to write at its length
        self.holders: weakref.WeakSet = weakref.WeakSet()  # every live state reading these
        self.spare: _Buffers | None = None

    @staticmethod
    def like(keys: dict[str, torch.Tensor], rows: int, cap: int) -> "_Buffers":
        return _Buffers({name: k.new_empty(rows, k.size(1), cap, *k.shape[3:]) for name, k in keys.items()})

    def fits(self, keys: dict[str, torch.Tensor], rows: int, length: int) -> bool:
        return (self.rows >= rows and self.cap >= length and self.tensors.keys() == keys.keys()
                and all(b.shape[1] == k.shape[1] and b.shape[3:] == k.shape[3:] and b.dtype == k.dtype
                        for b, k in ((self.tensors[n], keys[n]) for n in keys)))


class KVBuffer:
    """One decoder layer's self-attention keys of positions < ``length`` for ``rows`` rows (see the
    module docstring). An empty one (``KVBuffer()``) is the state before the first step."""

    def __init__(self, buffers: _Buffers | None = None, rows: int = 0, length: int = 0):
        self.buffers, self.rows, self.length = buffers, rows, length
        if buffers is not None:
            buffers.owner = self
            buffers.holders.add(self)

    def __bool__(self) -> bool:
        return True  # a state, even before its first step (Stack tests ``caches`` for truth)

    def keys(self) -> dict[str, torch.Tensor]:
        """The cached keys, each (rows, H, length, ·): views, valid until the next extend/select."""
        return {n: b[: self.rows, :, : self.length] for n, b in self.buffers.tensors.items()}

    def extend(self, new: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], "KVBuffer"]:
        """(cat of the cache and ``new`` (rows, H, T, ·) on the time axis, the state holding it)."""
        first = next(iter(new.values()))
        rows, end = first.size(0), self.length + first.size(2)
        b = self.buffers
        if self.length and rows != self.rows:
            raise ValueError(f"keys of {rows} rows extend a cache of {self.rows}")
        if b is None or b.owner is not self or not b.fits(new, rows, end):
            cap = FIRST_CAP if b is None else b.cap
            while cap < end:
                cap *= 2
            fresh = _Buffers.like(new, rows, cap)
            if self.length:  # an older state used again, or a full buffer: copy what it holds
                for n, t in self.keys().items():
                    fresh.tensors[n][:rows, :, : self.length].copy_(t)
            b = fresh
        for n, k in new.items():
            b.tensors[n][:rows, :, self.length : end].copy_(k)
        state = KVBuffer(b, rows, end)
        return state.keys(), state

    def select(self, index: torch.Tensor) -> "KVBuffer":
        """The cache of rows ``index``: as ``index_select(0, index)`` of every key."""
        if self.buffers is None:
            return self
        b, n = self.buffers, index.numel()
        spare = b.spare
        if spare is None or len(spare.holders) or spare.rows < n or spare.cap < self.length:
            spare = _Buffers({k: t.new_empty(max(n, b.rows), *t.shape[1:]) for k, t in b.tensors.items()})
        for name, t in self.keys().items():
            torch.index_select(t, 0, index, out=spare.tensors[name][:n, :, : self.length])
        spare.spare, b.spare = b, None  # the old buffers become the next reorder's target
        return KVBuffer(spare, n, self.length)

    def repeat_rows(self, k: int) -> "KVBuffer":
        """Every row repeated k times in place (beam search's first step)."""
        if self.buffers is None:
            return self
        index = torch.arange(self.rows, device=next(iter(self.buffers.tensors.values())).device)
        return self.select(index.repeat_interleave(k))


def buffers(layers: int) -> list[KVBuffer]:
    """The empty search state of a decoder of ``layers`` layers."""
    return [KVBuffer() for _ in range(layers)]


KERNELS = (Kernel("kv_cache.KVBuffer", "search keys", "attnmt.models.transformer.Layer",
                  "every attention variant (its extra keys are buffered alike)",
                  lambda layer: (True, ""), ("cpu", "cuda"), KVBuffer),)
