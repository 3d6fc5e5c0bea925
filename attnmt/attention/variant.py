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

A variant is one class and one call, ``register(VariantClass)`` (``attnmt.attention.register``
alike): every name in its ``names`` is then a value of ``model.{enc_self,dec_self,cross}_attention``
(config validation reads ``variant_names()``), and models build it by name (``unit_of``). Its
options are its own: ``Options``, a dataclass whose fields are the keys of ``model.<section>``
in YAML and ``--set model.<section>.<key>=...`` (section: its first name), each value coerced to
the field's type and checked by ``Options.check(fail)``; ``options_from(cfg)`` hands them to the
constructor. (The built-in relative and window variants read the flat keys ``model.relative_clip``
and ``model.window_*`` that saved runs hold.) Its fast paths are kernels that name it as the
definition they implement (kernels/dispatch.py): a module of kernels/ (the window's cross-attention
search step, kernels/window_search.py) or ``dispatch.register`` from a plug-in; without one it
computes the reference path, and a run says so in one line.
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
    Options: type | None = None  # its options' dataclass: the keys of model.<section()> (None: none)

    def __init__(self, name: str = "standard", options: Any = None):
        self.name = name
        self.options = options  # an ``Options`` (or what ``options_from`` hands a built-in)

    @classmethod
    def section(cls) -> str:
        """The name its options go under: ``model.<section>.<key>``."""
        return cls.names[0]

    @classmethod
    def options_from(cls, cfg: Any, name: str) -> Any:
        """Its options in ModelConfig ``cfg`` (its ``model.<section>`` keys; their defaults where
        the config has none), for ``name``, one of its names."""
        if cls.Options is None:
            return None
        return getattr(cfg, "variant_options", {}).get(cls.section()) or cls.Options()

    @classmethod
    def check(cls, cfg: Any, kind: str, fail: Callable[[str, str], None] = key_error) -> None:
        """Report settings of ``cfg`` (a ModelConfig) this variant cannot use as ``model.<kind>``
        with ``fail(key, message)`` (config validation adds the file and line). Its ``Options``
        check themselves (``Options.check(fail)``, keys relative to its section)."""
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


# -- the registry: config value -> the class implementing it --------------------------------------
_REGISTRY: dict[str, type[Variant]] = {}


def register(unit: type[Variant]) -> type[Variant]:
    """Make every name in ``unit.names`` a Transformer attention variant (``model.enc_self_attention``
    and the other kinds accept it; models build ``unit``). A name registered by another class is
    refused; the same class again (its module imported anew) replaces it. Returns ``unit``, so it
    may decorate the class."""
    if not (isinstance(unit, type) and issubclass(unit, Variant)):
        raise TypeError(f"{unit!r} is not a subclass of attnmt.attention.variant.Variant")
    if not unit.names:
        raise ValueError(f"{unit.__qualname__} names no config value (names is empty)")
    for name in unit.names:
        taken = _REGISTRY.get(name)
        if taken is not None and taken.__qualname__ != unit.__qualname__:
            raise ValueError(f"attention variant {name!r} is registered by {taken.__module__}.{taken.__qualname__}")
    sections = {other.section(): other for other in _REGISTRY.values()
                if other.Options is not None and other.__qualname__ != unit.__qualname__}
    if unit.Options is not None and unit.section() in sections:
        raise ValueError(f"options section {unit.section()!r} belongs to {sections[unit.section()].__qualname__}")
    for name in unit.names:
        _REGISTRY[name] = unit
    return unit


def variant_names() -> tuple[str, ...]:
    """Every registered variant name, in registration order (the built-ins first)."""
    return tuple(_REGISTRY)


def unit_of(variant: str) -> type[Variant]:
    """The class implementing a variant name."""
    try:
        return _REGISTRY[variant]
    except KeyError:
        raise ValueError(f"unknown attention variant {variant!r}") from None


def options_section(section: str) -> type[Variant] | None:
    """The registered variant whose options are ``model.<section>`` (None: no variant's)."""
    for unit in _REGISTRY.values():
        if unit.Options is not None and unit.section() == section:
            return unit
    return None


register(Variant)
