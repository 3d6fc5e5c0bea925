"""The interface of a Transformer attention variant, and the standard attention it defaults to.

Multi-head attention computes, per head, A = weights(QKᵀ/√d + B) and out = A V + extra. A variant
is one small class that says how it changes that, in up to six places (each a method whose
default leaves attention as it is):

    build(attn)                        add its parameters to the MultiHeadAttention module ``attn``
    keys(attn, x, given)               extra key-side tensors to cache with K and V, (B, H, S, ·)
    scores(attn, q, keys, ctx)         QKᵀ/√d, (B, H, T, S); a variant whose own scores share the
                                       product with K (the window's attention pointers) makes both
    bias(attn, q, S, allowed, q_pos, ctx)   B, added to the scaled scores (None: no bias)
    weights(attn, scores, q, x, keys, allowed, internals, given, ctx)   the weights from the
                                       biased scores; default softmax over the allowed keys
    values(attn, weights, ctx)         added to A V (None: nothing)

``ctx`` is a dict a variant may use to pass what one step computed on to a later one (``scores``
to ``weights``, ``bias`` to ``values``). ``maps``
names the variant's own linear maps of the query-side and of the key-side input (optional): in
self-attention both inputs are one x, and ``MultiHeadAttention.project_self`` multiplies x by them
in the same product as W_q, W_k, W_v (cross-attention: ``project_keys`` with W_k, W_v and
``project_queries`` with W_q); ``keys`` and ``weights`` then find ``lin(x)`` in ``given`` under
the map's name (``mapped``), and compute it themselves where no product made it. A variant
also declares ``self_only`` (it needs query and key positions of one sequence) and
``reads_query_positions`` (its bias uses ``q_pos``; else a search may attend a sentence's beam rows
as one block of queries, kernels/kv_cache.SharedKeys, whose keys ``key_layout`` lays out as the
variant's products read them), and checks its
options in ``check`` (called by config validation with the attention kind it was chosen for and a ``fail(key, message)``).
``attnmt/attention/multihead.py`` lists the variants; see ARCHITECTURE.md for adding one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from attnmt.errors import key_error
from attnmt.kernels import packed
from attnmt.kernels.attention_dropout import mask_bias


class Variant:
    """Standard scaled dot-product attention: softmax(QKᵀ/√d) V (Vaswani et al. 2017)."""

    names: tuple[str, ...] = ("standard",)  # config values this class implements
    self_only = False
    reads_query_positions = False  # bias() uses q_pos (the queries' absolute positions)
    operand_maps = False  # maps()' results are read only as packed products' operands (may stay bfloat16)

    def __init__(self, name: str = "standard", window: Any = None, relative_clip: int = 16):
        self.name = name  # options: ``window`` (WindowOptions) and ``relative_clip`` for the variants that use them

    @classmethod
    def check(cls, cfg: Any, kind: str, fail: Callable[[str, str], None] = key_error) -> None:
        """Report settings of ``cfg`` (a ModelConfig) this variant cannot use as ``model.<kind>``
        with ``fail(key, message)`` (config validation adds the file and line)."""
        if cls.self_only and kind == "cross_attention":
            fail("model.cross_attention", f"{cfg.cross_attention!r} exists for self-attention only")

    def build(self, attn: torch.nn.Module) -> None:
        pass

    def maps(self, attn: nn.Module) -> tuple[dict[str, nn.Module], dict[str, nn.Module]]:
        """Its linear maps of the query-side input and of the key-side input, by name (names
        distinct over both): the extra products attention stacks with its own (with Q, K, V in
        self-attention; with K, V and with Q apart in cross-attention)."""
        return {}, {}

    def keys(self, attn: nn.Module, x: torch.Tensor, given: dict[str, torch.Tensor] | None = None
             ) -> dict[str, torch.Tensor]:
        return {}

    def key_layout(self, name: str, key: torch.Tensor) -> torch.Tensor:
        """Cached key ``name`` (B, H, S, ·) laid out as this variant's step reads it (a search's
        cross-attention memory, once per batch: kernels/kv_cache.SharedKeys.laid_out): the same
        values, in strides its products read without a copy. Default: K stored as a contiguous
        Kᵀ (q Kᵀ), the others contiguous."""
        if name == "k":
            return key.transpose(2, 3).contiguous().transpose(2, 3)
        return key.contiguous()

    def scores(self, attn, q: torch.Tensor, keys: dict[str, torch.Tensor], ctx: dict) -> torch.Tensor:
        """QKᵀ/√d (B, H, T, S) from q (B, H, T, d_h) and the cached keys."""
        return packed.matmul(q, keys["k"].transpose(-1, -2)) * attn.scale

    def bias(self, attn, q: torch.Tensor, n_keys: int, allowed: torch.Tensor, q_pos: torch.Tensor,
             ctx: dict) -> torch.Tensor | None:
        return None

    def weights(self, attn, scores: torch.Tensor, q: torch.Tensor, x: torch.Tensor,
                keys: dict[str, torch.Tensor], allowed: torch.Tensor, internals: dict | None,
                given: dict[str, torch.Tensor] | None = None, ctx: dict | None = None) -> torch.Tensor:
        return torch.softmax(masked(scores, allowed), dim=-1)

    def values(self, attn, weights: torch.Tensor, ctx: dict) -> torch.Tensor | None:
        return None


def masked(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """``scores.masked_fill(~allowed, −inf)`` for ``allowed`` bool, broadcastable to scores: the
    same, as an added bias of 0 / −inf the size of ``allowed`` (on the CPU a fill through a
    broadcast mask takes ~5x the time of the add)."""
    return scores + mask_bias(allowed, scores.dtype)


def mapped(lin: nn.Module, x: torch.Tensor, given: dict[str, torch.Tensor] | None, name: str) -> torch.Tensor:
    """``lin(x)``: the product attention's stacked projection already made (``given[name]``, the
    same math in one stacked product) where it did, else ``lin`` applied here."""
    return given[name] if given is not None and name in given else lin(x)
