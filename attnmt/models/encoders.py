"""Stacked LSTM encoder (Luong et al. 2015, section 3; Zaremba et al. 2015 dropout)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnmt.data.vocab import PAD
from attnmt.models.fused_rnn import lstm_layer


class LSTMEncoder(nn.Module):
    """Embeds the source and runs an L-layer LSTM over it.

    Returns the source states h̄_s (B, S, hidden) and the final (h, c), each (L, B, hidden), used to
    initialise the decoder. A bidirectional encoder runs hidden/2 units each way and concatenates,
    so downstream sizes do not change. Dropout (Zaremba et al.) sits on the non-recurrent
    connections: the embeddings and between layers.

    On CUDA the LSTM runs as one ``nn.LSTM`` call on the packed batch (cuDNN). On CPU the same
    ``nn.LSTM`` parameters run in a step loop over the right-padded batch (``_run_steps``): the
    packed CPU kernel's backward slices the (tokens, 4H) input projection once per time step, and
    each slice's gradient is a full-size zero tensor written and added up. Both paths compute the
    same function (tests/test_encoder_steps.py); inter-layer dropout draws different masks.
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
        if emb.device.type == "cpu":
            states, (h, c) = self._run_steps(emb, lengths.to(emb.device))
        else:
            # cuDNN runs the whole packed batch in one kernel; a Python step loop would be slower
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

        x: (B, S, E) with padding at the end of each row. Returns the top layer's states (B, S, H')
        (zero at padding) and the final (h, c), each (L·D, B, H') in nn.LSTM's order. Every
        direction runs over all S steps; padding comes after each row's last word, so it never
        reaches the states at real positions, and the final state is read at position length-1.
        The backward direction runs forward over each row reversed within its length."""
        if bool((lengths < 1).any()):
            raise ValueError("Length of all samples has to be greater than 0")
        B, S, _ = x.shape
        steps = torch.arange(S, device=x.device)
        valid = steps < lengths.unsqueeze(1)  # (B, S)
        last = (lengths - 1).view(B, 1, 1)
        rev = None
        if self.bidirectional:  # rev[b, t] = length_b - 1 - t at real positions, t at padding
            rev = torch.where(valid, lengths.unsqueeze(1) - 1 - steps, steps)  # its own inverse
        h_n, c_n = [], []
        for layer in range(self.layers):
            outs = []
            for suffix in ("", "_reverse") if self.bidirectional else ("",):
                inp = x if not suffix else x.gather(1, rev.unsqueeze(-1).expand_as(x))
                out, cells = self._direction(inp, f"l{layer}{suffix}")  # (B, S, H') each
                index = last.expand(B, 1, out.size(-1))
                h_n.append(out.gather(1, index).squeeze(1))
                c_n.append(cells.gather(1, index).squeeze(1))
                outs.append(out if not suffix else out.gather(1, rev.unsqueeze(-1).expand_as(out)))
            x = torch.cat(outs, dim=-1) if len(outs) > 1 else outs[0]
            if layer < self.layers - 1 and self.rnn.dropout > 0:
                x = F.dropout(x, self.rnn.dropout, self.training)
        states = x.masked_fill(~valid.unsqueeze(-1), 0.0)
        return states, (torch.stack(h_n), torch.stack(c_n))

    def _direction(self, x: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer, one direction of self.rnn from a zero state over all steps of x (B, S, in):
        returns h_t and c_t for every t, each (B, S, H')."""
        w_ih = getattr(self.rnn, f"weight_ih_{name}")
        w_hh = getattr(self.rnn, f"weight_hh_{name}")
        bias = getattr(self.rnn, f"bias_ih_{name}") + getattr(self.rnn, f"bias_hh_{name}")
        proj = F.linear(x, w_ih, bias)  # (B, S, 4H'): the input half of the gates, all steps
        if torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu"):
            return lstm_layer(proj, w_hh)  # hand-written backward: W_hh's gradient in one product
        w_hh_t = w_hh.t()
        hs, cs = [], []
        # zero initial state; the first step's product with it keeps W_hh's gradient a (zero)
        # tensor when every row has length 1, as nn.LSTM's is (optimizers treat None differently)
        h = c = x.new_zeros(x.size(0), w_hh.size(1))
        # unbind, not proj[:, t]: a slice's backward writes a zero gradient of proj's full size
        for proj_t in proj.unbind(1):
            gates = torch.addmm(proj_t, h, w_hh_t)
            i, f, g, o = gates.chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            hs.append(h)
            cs.append(c)
        return torch.stack(hs, 1), torch.stack(cs, 1)
