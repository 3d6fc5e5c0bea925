"""Attention: RNN attention modules (see base.py for the interface they share), their score
functions, and the Transformer's attention variants.

Everything new is one class and one call, ``register``:

* ``register("name", factory)``: an RNN attention, a module with ``prepare`` and ``forward``
  (base.py); ``model.attention: name`` then passes config validation and ``build_attention``
  makes ``factory(cfg, query_dim, memory_dim)``.
* ``register(ScoreClass)``: a score of global (and, if ``content``, local) attention, a subclass of
  ``global_attention.ScoreFunction``; ``model.score`` accepts its ``name``.
* ``register(VariantClass)``: a Transformer attention variant, a subclass of
  ``variant.Variant`` (its options, its checks); ``model.{enc_self,dec_self,cross}_attention``
  accept its ``names``.

Each takes the reference path (its own forward) unless a kernel declares it
(attnmt/kernels/dispatch.py); a run says so in one line. The built-ins are registered by their
own modules, imported here.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

# the built-in variants register themselves, in the order config errors list them
from attnmt.attention import relative, localness, window  # noqa: F401, I001
from attnmt.attention.base import Memory, masked_softmax
from attnmt.attention.global_attention import SCORES, GlobalAttention, ScoreFunction, register_score, score_names
from attnmt.attention.local_attention import MODES as LOCAL_MODES
from attnmt.attention.local_attention import LocalAttention
from attnmt.attention.variant import Variant, variant_names
from attnmt.attention.variant import register as register_variant

ATTENTIONS = ("none", "global") + LOCAL_MODES  # model.attention of the LSTM decoder (+ registered)

# attentions added by ``register``: name -> factory(cfg, query_dim, memory_dim)
REGISTERED: dict[str, Callable[..., nn.Module]] = {}

__all__ = [
    "ATTENTIONS",
    "LOCAL_MODES",
    "SCORES",
    "GlobalAttention",
    "LocalAttention",
    "Memory",
    "build_attention",
    "masked_softmax",
    "register",
    "score_names",
    "variant_names",
]


def register(name: str | type, factory: Callable[..., nn.Module] | None = None) -> type | None:
    """``register("name", factory)``: accept ``model.attention: name`` and build it as
    ``factory(cfg, query_dim, memory_dim)`` (cfg: the ModelConfig; a class with that ``__init__``
    will do); registering a name twice replaces the factory, a built-in name is refused.
    ``register(cls)`` for a ``ScoreFunction`` or ``Variant`` subclass: ``register_score`` /
    ``variant.register`` (returns the class, so it may decorate it)."""
    global ATTENTIONS
    if isinstance(name, type):
        if factory is not None:
            raise TypeError("register(cls) takes the class alone")
        if issubclass(name, ScoreFunction):
            return register_score(name)
        if issubclass(name, Variant):
            return register_variant(name)
        raise TypeError(f"{name.__qualname__} is neither a ScoreFunction nor a Variant subclass")
    if factory is None:
        raise TypeError(f"register({name!r}) needs the attention's factory")
    if name in ("none", "global") + LOCAL_MODES:
        raise ValueError(f"{name!r} is a built-in attention")
    REGISTERED[name] = factory
    if name not in ATTENTIONS:
        ATTENTIONS = ATTENTIONS + (name,)  # config validation reads this tuple
    return None


def build_attention(cfg, query_dim: int, memory_dim: int) -> nn.Module | None:
    """The attention module a ModelConfig asks for (None for the no-attention baseline)."""
    kind = cfg.attention
    if kind == "none":
        return None
    if kind == "global":
        return GlobalAttention(cfg.score, query_dim, memory_dim, cfg.max_src_len)
    if kind in LOCAL_MODES:
        # sigma 0 = the paper's default (D/2 for local-p, no Gaussian for local-m); .inf = none
        sigma = cfg.sigma if cfg.sigma > 0 else None
        return LocalAttention(
            kind, cfg.score, query_dim, memory_dim, cfg.window, sigma, cfg.local_composition
        )
    if kind in REGISTERED:
        return REGISTERED[kind](cfg, query_dim, memory_dim)
    raise ValueError(f"unknown attention {kind!r}")
