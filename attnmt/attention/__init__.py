"""Attention modules for RNN decoders; see base.py for the interface they share."""

from __future__ import annotations

from torch import nn

from attnmt.attention.base import Memory, masked_softmax
from attnmt.attention.global_attention import SCORES, GlobalAttention
from attnmt.attention.local_attention import MODES as LOCAL_MODES
from attnmt.attention.local_attention import LocalAttention

ATTENTIONS = ("none", "global") + LOCAL_MODES  # model.attention of the LSTM decoder

__all__ = [
    "ATTENTIONS",
    "LOCAL_MODES",
    "SCORES",
    "GlobalAttention",
    "LocalAttention",
    "Memory",
    "build_attention",
    "masked_softmax",
]


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
    raise ValueError(f"unknown attention {kind!r}")
