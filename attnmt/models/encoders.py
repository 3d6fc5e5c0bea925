"""Stacked LSTM encoder (Luong et al. 2015, section 3; Zaremba et al. 2015 dropout)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnmt.data.vocab import PAD


class LSTMEncoder(nn.Module):
    """Embeds the source and runs an L-layer LSTM over it.

    Returns the source states h̄_s (B, S, hidden) and the final (h, c), each (L, B, hidden), used to
    initialise the decoder. A bidirectional encoder runs hidden/2 units each way and concatenates,
    so downstream sizes do not change. Dropout (Zaremba et al.) sits on the non-recurrent
    connections: the embeddings and between layers.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        hidden: int,
        layers: int,
        dropout: float = 0.0,
        bidirectional: bool = False,
    ):
        super().__init__()
        if bidirectional and hidden % 2:
            raise ValueError("a bidirectional encoder needs an even hidden size")
        self.layers = layers
        self.bidirectional = bidirectional
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
        self.dropout = nn.Dropout(dropout)
        self.rnn = nn.LSTM(
            embed_dim,
            hidden // 2 if bidirectional else hidden,
            layers,
            batch_first=True,
            dropout=dropout if layers > 1 else 0.0,
            bidirectional=bidirectional,
        )

    def forward(
        self, src: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        # src: (B, S) token ids, lengths: (B,)
        emb = self.dropout(self.embedding(src))  # (B, S, E)
        packed = pack_padded_sequence(emb, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, (h, c) = self.rnn(packed)
        states, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))
        if self.bidirectional:  # (2L, B, H/2) -> (L, B, H): join the two directions per layer
            h = torch.cat([h[0::2], h[1::2]], dim=-1)
            c = torch.cat([c[0::2], c[1::2]], dim=-1)
        return states, (h, c)  # (B, S, H), ((L, B, H), (L, B, H))
