"""Multi-head attention (Vaswani et al. 2017) with the variants the Transformer models can select.

    standard         softmax(QKᵀ/√d) V                                    (variant.py)
    relative         Shaw et al. 2018 relative position representations    (relative.py; self only)
    localness        Yang et al. 2018 Gaussian bias −(j − P_i)²/(2σ_i²)     (localness.py)
    window-mul       Nguyen et al. 2020, softmax(QKᵀ/√d) ⊙ M                 (window.py; token mask)
    window-add       Nguyen et al. 2020, softmax(QKᵀ/√d + (Q_L K_Lᵀ/√d) ⊙ M)  (window.py; token mask)
    window-mul-seg   / window-add-seg: the same with segment-based masks

and any other registered one. Each variant is one class (the interface and the registry:
attention/variant.py), built here by name (``unit_of``) with its options. Keys are projected
separately from queries (``project_keys``) so that callers can cache them: the decoder caches its
self-attention keys step by step, and cross-attention keys of the encoder output are computed once
per sentence. Everything cached has shape (B, H, S, ·).

``use_variant = False`` switches a module to plain attention with the same Q/K/V/O weights (its
extra parameters are then unused): the "window disabled" model is the plain Transformer.
``definition`` is the variant whose maths the module computes now (the standard one when switched
off): what kernels/dispatch.py matches kernels against. ``role`` (set by the model: "encoder
self-attention", "decoder self-attention", "cross-attention") names the parts of a run it takes
through ``dispatch.choose`` (dispatch.ROLES).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnmt.attention.variant import Variant, unit_of, variant_names
from attnmt.kernels import packed
from attnmt.kernels import dropout as dropout_kernel
from attnmt.kernels.dispatch import choose

__all__ = ["MultiHeadAttention", "unit_of", "variant_names"]


class MultiHeadAttention(nn.Module):
    def __init__(
        self,
        d_model: int,
        heads: int,
        dropout: float = 0.0,
        variant: str = "standard",
        options: object = None,
        linear: type[nn.Linear] = nn.Linear,
    ):
        """``options``: the variant's (its ``Options``, or what its ``options_from`` makes of a
        config; None: its defaults)."""
        super().__init__()
        if d_model % heads:
            raise ValueError(f"model size {d_model} is not divisible by {heads} heads")
        self.d_model, self.heads, self.head_dim = d_model, heads, d_model // heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.variant = variant
        self.unit = unit_of(variant)(variant, options)  # a plain object: no parameters
        self.use_variant = variant != "standard"
        self.role = ""  # the model's name for it (dispatch.ROLES): the parts it takes
        self.dropout = dropout
        self.linear = linear  # the class of the projections (the Transformer's: PackedLinear)
        self.q = linear(d_model, d_model)
        self.k = linear(d_model, d_model)
        self.v = linear(d_model, d_model)
        self.o = linear(d_model, d_model)
        self.unit.build(self)  # the variant's own parameters, registered on this module
        for lin in (self.q, self.k, self.v, self.o):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)

    @property
    def definition(self) -> Variant:
        """The variant this module computes now: its own, or standard attention when switched off."""
        return self.unit if self.use_variant else _STANDARD

    # -- shapes ---------------------------------------------------------------------------------
    def _split(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, H, T, d_h)"""
        B, T, _ = x.shape
        return x.view(B, T, self.heads, self.head_dim).transpose(1, 2)

    def _merge(self, x: torch.Tensor) -> torch.Tensor:
        B, H, T, d = x.shape
        return x.transpose(1, 2).reshape(B, T, H * d)

    def _low(self, maps) -> int:
        """How many of the variant's maps ``packed.products`` may leave in bfloat16: all of them
        where the variant reads their results only as products' operands (``Variant.operand_maps``)."""
        return len(maps) if self.unit.operand_maps else 0

    def project_keys(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Everything attention needs from the key side: (B, S, D) -> dict of (B, H, S, ·), as one
        product of [W_k; W_v; the variant's key-side maps] where ``packed.products`` can."""
        _, key_maps = self.unit.maps(self)
        k, v, *rest = packed.products(x, (self.k, self.v, *key_maps.values()), self._low(key_maps))
        keys = {"k": self._split(k), "v": self._split(v)}
        keys.update(self.unit.keys(self, x, dict(zip(key_maps, rest))))  # cached even when switched off
        return keys

    def project_queries(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Cross-attention's queries (B, H, T, d_h) and the variant's query-side products of x
        (``forward``'s ``given``), as one product of [W_q; the variant's query-side maps] where
        ``packed.products`` can."""
        query_maps = self.unit.maps(self)[0] if self.use_variant else {}
        if not query_maps:
            return self._split(self.q(x)), {}
        q, *rest = packed.products(x, (self.q, *query_maps.values()), self._low(query_maps))
        return self._split(q), dict(zip(query_maps, rest))

    def project_self(
        self, x: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Self-attention's queries (B, H, T, d_h), ``project_keys(x)`` of the same x, and the
        variant's query-side products of x (``Variant.maps``; ``forward``'s ``given``), as one
        product of [W_q; W_k; W_v; the variant's maps] where ``packed.products`` can (training,
        and a search's or validation's packed maps on the CPU; elsewhere the maps one by one).
        Query-side products stay out of the keys: a search caches those (kv_cache.KVBuffer)."""
        query_maps, key_maps = self.unit.maps(self)
        if not self.use_variant:  # weights() is not called, but its keys are still cached
            query_maps = {}
        names = (*query_maps, *key_maps)
        maps = (self.q, self.k, self.v, *query_maps.values(), *key_maps.values())
        q, k, v, *rest = packed.products(x, maps, self._low(names))
        given = dict(zip(names, rest))
        keys = {"k": self._split(k), "v": self._split(v)}
        keys.update(self.unit.keys(self, x, {name: given[name] for name in key_maps}))
        return self._split(q), keys, {name: given[name] for name in query_maps}

    # -- attention ------------------------------------------------------------------------------
    def forward(
        self,
        x: torch.Tensor,
        keys: dict[str, torch.Tensor],
        key_mask: torch.Tensor | None = None,
        causal: bool = False,
        q_offset: int = 0,
        need_weights: bool = False,
        internals: dict | None = None,
        queries: torch.Tensor | None = None,
        given: dict[str, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, D) queries; keys from ``project_keys`` (S keys); key_mask (B, S) bool, True on
        real keys (None: all real); causal: query t (absolute position q_offset + t) sees keys
        <= its position. Returns output (B, T, D) and weights (B, H, T, S) when asked.
        ``internals``, if a dict, receives the weights ``attn`` and, for window variants, the soft
        mask ``mask`` and pointers ``phi_l``, ``phi_r``, all (B, H, T, S). ``queries``, ``given``:
        the projected queries of x and the variant's query-side products of x when the caller has
        them (``project_self``)."""
        if queries is None:
            queries, given = self.project_queries(x)
        q = queries  # (B, H, T, d_h)
        k, v = keys["k"], keys["v"]
        T, S = q.size(2), k.size(2)
        # a decoding step's one query, at the last position, sees every key: no causal mask
        causal = causal and not (T == 1 and q_offset == S - 1)
        allowed = None if key_mask is None else key_mask[:, None, None, :]
        q_pos = torch.arange(T, device=q.device) + q_offset
        if causal:
            earlier = (torch.arange(S, device=q.device)[None, :] <= q_pos[:, None])[None, None]
            allowed = earlier if allowed is None else allowed & earlier
        drop = self.dropout if self.training else 0.0
        if not need_weights and internals is None:
            kernel, _ = choose("multi-head attention", self)  # standard attention: SDPA
            if kernel is not None:
                return self.o(self._merge(kernel.run(q, k, v, allowed, self.scale, drop))), None

        if allowed is None:
            allowed = torch.ones(1, 1, 1, S, dtype=torch.bool, device=q.device)
        unit = self.definition
        ctx: dict = {}
        scores = unit.scores(self, q, keys, ctx)  # (B, H, T, S)
        bias = unit.bias(self, q, S, allowed, q_pos, ctx)
        if bias is not None:
            scores = scores + bias
        attn = unit.weights(self, scores, q, x, keys, allowed, internals, given, ctx)
        if internals is not None:
            internals["attn"] = attn
        dropped = dropout_kernel.dropout(attn, drop, self.training) if drop > 0 else attn
        out = packed.matmul(dropped, v)  # (B, H, T, d_h)
        extra = unit.values(self, dropped, ctx)
        if extra is not None:
            out = out + extra
        return self.o(self._merge(out)), (attn if need_weights else None)


_STANDARD = Variant()
