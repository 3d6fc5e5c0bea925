"""Attention modules for RNN decoders; see base.py for the interface they share.

A new attention is one module with ``prepare`` and ``forward`` (base.py) and one call,
``register("name", factory)``: ``model.attention: name`` then passes config validation and
``build_attention`` makes ``factory(cfg, query_dim, memory_dim)``. It takes the reference path
(its own forward at every step) unless a kernel declares it (attnmt/kernels/dispatch.py); a run
says so in one line.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from attnmt.attention.base import Memory, masked_softmax
from attnmt.attention.global_attention import SCORES, GlobalAttention
from attnmt.attention.local_attention import MODES as LOCAL_MODES
from attnmt.attention.local_attention import LocalAttention

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
]


def register(name: str, factory: Callable[..., nn.Module]) -> None:
    """Accept ``model.attention: name`` and build it as ``factory(cfg, query_dim, memory_dim)``
    (cfg: the ModelConfig; a class with that ``__init__`` will do). Registering a name twice
    replaces the factory; a built-in name is refused."""
    global ATTENTIONS
    if name in ("none", "global") + LOCAL_MODES:
        raise ValueError(f"{name!r} is a built-in attention")
    REGISTERED[name] = factory
    if name not in ATTENTIONS:
        ATTENTIONS = ATTENTIONS + (name,)  # config validation reads this tuple


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
