"""Stacked LSTM encoder (Luong et al. 2015, section 3; Zaremba et al. 2015 dropout)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnmt.data.vocab import PAD
from attnmt.kernels.fused_rnn import dropout, lstm_layer
from attnmt.kernels.packed import product


class LSTMEncoder(nn.Module):
    """Embeds the source and runs an L-layer LSTM over it.

    Returns the source states h̄_s (B, S, hidden) and the final (h, c), each (L, B, hidden), used to
    initialise the decoder. A bidirectional encoder runs hidden/2 units each way and concatenates,
    so downstream sizes do not change. Dropout (Zaremba et al.) sits on the non-recurrent
    connections: the embeddings and between layers.

    On CUDA the LSTM runs as one ``nn.LSTM`` call on the packed batch (cuDNN). On CPU the same
    ``nn.LSTM`` parameters run time-major over the right-padded batch (``_run_steps``), each layer
    as one input projection for all steps plus kernels/fused_rnn.lstm_layer, whose hand-written
    backward forms W_hh's gradient in one product (the packed CPU kernel's backward slices the
    (tokens, 4H) input projection once per step, writing a full-size zero gradient each time).
    Both paths compute the same function (tests/test_encoder_steps.py); dropout draws different
    masks.
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
        if src.device.type == "cpu":
            emb = dropout(self.embedding(src.t()), self.dropout.p, self.training)  # (S, B, E): time-major
            states, (h, c) = self._run_steps(emb, lengths)
        else:
            # cuDNN runs the whole packed batch in one kernel; a Python step loop would be slower
            emb = self.dropout(self.embedding(src))  # (B, S, E)
            packed = pack_padded_sequence(
                emb, lengths.cpu(), batch_first=True, enforce_sorted=False
            )
            out, (h, c) = self.rnn(packed)
            states, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))
        if self.bidirectional:  # (2L, B, H/2) -> (L, B, H): join the two directions per layer
            h = torch.cat([h[0::2], h[1::2]], dim=-1)
            c = torch.cat([c[0::2], c[1::2]], dim=-1)
        return states, (h, c)  # (B, S, H), ((L, B, H), (L, B, H))

    # -- CPU: step loop over the padded batch ------------------------------------------------
    def _run_steps(
        self, x: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """What ``self.rnn`` computes on the packed batch, from the right-padded one.

        x: (S, B, E), time-major, with padding after each row's last word. Returns the top layer's
        states (B, S, H') (zero at padding) and the final (h, c), each (L·D, B, H') in nn.LSTM's
        order. Every direction runs over all S steps; padding comes after each row's last word, so
        it never reaches the states at real positions, and the final state is read at position
        length-1. The backward direction runs forward over each row reversed within its length."""
        if bool((lengths < 1).any()):
            raise ValueError("Length of all samples has to be greater than 0")
        S, B, _ = x.shape
        steps = torch.arange(S, device=x.device).unsqueeze(1)  # (S, 1)
        valid = steps < lengths.unsqueeze(0)  # (S, B)
        last = (lengths - 1).view(1, B, 1)
        rev = None
        if self.bidirectional:  # rev[t, b] = length_b - 1 - t at real positions, t at padding
            rev = torch.where(valid, lengths.unsqueeze(0) - 1 - steps, steps).unsqueeze(-1)  # its own inverse
        h_n, c_n = [], []
        for layer in range(self.layers):
            outs = []
            for suffix in ("", "_reverse") if self.bidirectional else ("",):
                inp = x if not suffix else x.gather(0, rev.expand_as(x))
                out, cells = self._direction(inp, f"l{layer}{suffix}")  # (S, B, H') each
                index = last.expand(1, B, out.size(-1))
                h_n.append(out.gather(0, index).squeeze(0))
                c_n.append(cells.gather(0, index).squeeze(0))
                outs.append(out if not suffix else out.gather(0, rev.expand_as(out)))
            x = torch.cat(outs, dim=-1) if len(outs) > 1 else outs[0]
            if layer < self.layers - 1 and self.rnn.dropout > 0:
                x = dropout(x, self.rnn.dropout, self.training)
        states = x.masked_fill(~valid.unsqueeze(-1), 0.0).transpose(0, 1).contiguous()  # (B, S, H')
        return states, (torch.stack(h_n), torch.stack(c_n))

    def _direction(self, x: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer, one direction of self.rnn from a zero state over all steps of x (S, B, in):
        h_t and c_t for every t, each (S, B, H'), by kernels/fused_rnn.lstm_layer."""
        w_ih = getattr(self.rnn, f"weight_ih_{name}")
        w_hh = getattr(self.rnn, f"weight_hh_{name}")
        bias = getattr(self.rnn, f"bias_ih_{name}") + getattr(self.rnn, f"bias_hh_{name}")
        proj = product(x, w_ih, bias)  # (S, B, 4H'): the input half of the gates, all steps
        return lstm_layer(proj, w_hh)
