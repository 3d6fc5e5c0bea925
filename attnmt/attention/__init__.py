"""Attention modules for RNN decoders; see base.py for the interface they share."""

from __future__ import annotations

from torch import nn

from attnmt.attention.base import Memory, masked_softmax
from attnmt.attention.global_attention import SCORES, GlobalAttention

__all__ = ["Memory", "masked_softmax", "GlobalAttention", "SCORES", "build_attention"]


def build_attention(cfg, query_dim: int, memory_dim: int) -> nn.Module | None:
    """The attention module a ModelConfig asks for (None for the no-attention baseline)."""
    kind = cfg.attention
    if kind == "none":
        return None
    if kind == "global":
        return GlobalAttention(cfg.score, query_dim, memory_dim, cfg.max_src_len)
    raise ValueError(f"unknown attention {kind!r}")
