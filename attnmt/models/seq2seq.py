"""The Luong et al. (2015) encoder-decoder: stacked LSTMs joined by an attention module.

Every generation model in attnmt exposes the same small interface, which the trainer and the
search use without knowing the architecture:

    logits, weights = model(src, src_lengths, tgt_in, need_weights=False)   # teacher forcing
        # src (B, S), src_lengths (B,), tgt_in (B, T) = [<s>, y_1 .. y_{T-1}]
        # logits (B, T, V); weights (B, T, S) or None
    enc   = model.encode(src, src_lengths)                 # anything select_batch can reorder
    state = model.init_state(enc)
    logits, state, weights = model.step(prefix, state, enc, need_weights)
        # prefix (B, t) all tokens so far (starting with <s>); logits (B, V); weights (B, S)|None
"""

from __future__ import annotations

import torch
from torch import nn

from attnmt.attention import build_attention
from attnmt.attention.base import Memory
from attnmt.config import ModelConfig
from attnmt.data.vocab import PAD
from attnmt.kernels.dispatch import choose
from attnmt.kernels.fused_loss import linear_cross_entropy
from attnmt.models.common import init_uniform_, lengths_to_mask, rows_loss
from attnmt.models.decoders import LuongDecoder
from attnmt.models.encoders import LSTMEncoder


class Seq2Seq(nn.Module):
    def __init__(self, cfg: ModelConfig, src_vocab: int, tgt_vocab: int, init_uniform: float = 0.0):
        super().__init__()
        self.cfg = cfg
        self.encoder = LSTMEncoder(
            src_vocab, cfg.embed, cfg.hidden, cfg.layers, cfg.dropout, cfg.bidirectional
        )
        attention = build_attention(cfg, query_dim=cfg.hidden, memory_dim=cfg.hidden)
        self.decoder = LuongDecoder(
            tgt_vocab,
            cfg.embed,
            cfg.hidden,
            cfg.layers,
            attention,
            memory_dim=cfg.hidden,
            input_feed=cfg.input_feed,
            dropout=cfg.dropout,
        )
        if init_uniform > 0:
            init_uniform_(self, init_uniform)

    @property
    def has_attention(self) -> bool:
        return self.decoder.attention is not None

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> dict:
        states, (h, c) = self.encoder(src, src_lengths)  # (B, S, H), (L, B, H) x2
        mask = lengths_to_mask(src_lengths, src.size(1))  # (B, S)
        if self.decoder.attention is not None:
            memory = self.decoder.attention.prepare(states, mask)
        else:
            memory = Memory(values=states, keys=states, mask=mask, lengths=src_lengths)
        return {"memory": memory, "h": h.transpose(0, 1), "c": c.transpose(0, 1)}

    def init_state(self, enc: dict) -> dict[str, torch.Tensor]:
        """The decoder starts from the encoder's final state; the first fed h̃_0 is zero."""
        h = enc["h"]  # (B, L, H)
        return {"h": h, "c": enc["c"], "feed": h.new_zeros(h.size(0), self.cfg.hidden)}

    def forward(
        self,
        src: torch.Tensor,
        src_lengths: torch.Tensor,
        tgt_in: torch.Tensor,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        enc = self.encode(src, src_lengths)
        memory = enc["memory"] if self.has_attention else None
        logits, _, weights = self.decoder(tgt_in, self.init_state(enc), memory, 0, need_weights)
        return logits, weights

    def token_loss(
        self,
        src: torch.Tensor,
        src_lengths: torch.Tensor,
        tgt_in: torch.Tensor,
        tgt_out: torch.Tensor,
        smoothing: float = 0.0,
    ) -> torch.Tensor:
        """``models.common.token_loss(self(src, src_lengths, tgt_in)[0], tgt_out, smoothing)``,
        the summed cross-entropy over non-padding targets, with the output layer W_s applied to
        the non-padding positions only (a padded batch's padding rows cost a full softmax layer
        each otherwise; float64 logits are not cast down). The trainer calls it when the model's
        class defines it."""
        enc = self.encode(src, src_lengths)
        memory = enc["memory"] if self.has_attention else None
        features, _, _ = self.decoder.features(tgt_in, self.init_state(enc), memory, 0, False)
        keep = tgt_out != PAD  # (B, T)
        W_s = self.decoder.W_s
        if torch.is_grad_enabled() and features.device.type == "cpu" and not torch.is_autocast_enabled("cpu"):
            return linear_cross_entropy(features[keep], W_s.weight, W_s.bias, tgt_out[keep], smoothing)
        return rows_loss(W_s, features[keep], tgt_out[keep], smoothing)

    def step(
        self,
        prefix: torch.Tensor,
        state: dict[str, torch.Tensor],
        enc: dict,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor | None]:
        t = prefix.size(1) - 1  # index of the target word being predicted
        memory = enc["memory"] if self.has_attention else None
        if not self.decoder.training and not torch.is_grad_enabled():
            kernel, _ = choose("search step", self.decoder)  # kernels/lstm_steps.infer_step
            if kernel is not None:
                return kernel.run(self.decoder, prefix[:, -1], state, memory, t, need_weights)
        logits, state, weights = self.decoder(prefix[:, -1:], state, memory, t, need_weights)
        return logits[:, 0], state, (weights[:, 0] if weights is not None else None)
