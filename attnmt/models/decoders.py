"""Stacked LSTM decoder with Luong attention and input feeding (Luong et al. 2015, sections 3-3.3).

At each target step t:

    h_t   = LSTM(x_t, h_{t-1})                    x_t = [emb(y_{t-1}); h̃_{t-1}] with input feeding,
                                                      emb(y_{t-1}) without
    c_t, a_t = attention(h_t, h̄_1..S)             (any module of attnmt.attention)
    h̃_t   = tanh(W_c [c_t; h_t])                  (eq. 5, the attentional hidden state)
    p(y_t | y_<t, x) = softmax(W_s h̃_t)           (eq. 6)

Without attention (the paper's base system) h̃_t = h_t. Teacher forcing without input feeding runs
the LSTM over the whole target in one fused call and attends for all T steps at once; with input
feeding the steps depend on each other and run in a loop whose per-step work is one matmul per
layer (input and recurrent weights concatenated; the embedding half of layer 1 precomputed for all
steps). The output projection W_s is always applied once, to all steps together.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnmt.attention.base import Memory
from attnmt.data.vocab import PAD
from attnmt.kernels import attention_steps, lstm_steps


class LuongDecoder(nn.Module):
    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        hidden: int,
        layers: int,
        attention: nn.Module | None,
        memory_dim: int,
        input_feed: bool = True,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.hidden = hidden
        self.layers = layers
        self.embed_dim = embed_dim
        self.input_feed = input_feed
        self.attention = attention
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
        self.dropout = nn.Dropout(dropout)
        # input feeding widens layer 1's input from E to E + H
        input_dim = embed_dim + (hidden if input_feed else 0)
        self.rnn = nn.LSTM(
            input_dim, hidden, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0
        )
        self.W_c = nn.Linear(memory_dim + hidden, hidden, bias=False) if attention else None
        self.W_s = nn.Linear(hidden, vocab_size)

    # -- the attentional layer -------------------------------------------------------------
    def _attend(
        self,
        h: torch.Tensor,
        memory: Memory | None,
        positions: torch.Tensor,
        need_weights: bool,
        attend=None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """h_t (B, T, H) -> h̃_t (B, T, H) and a_t (B, T, S) or None. ``attend``: the attention's
        step function over ``memory`` (kernels/attention_steps.py), if a kernel gives one."""
        if self.attention is None:
            return h, None
        if attend is not None:
            context, weights = attend(h, positions, need_weights)
        else:
            context, weights = self.attention(h, memory, positions, need_weights)  # (B,T,d), (B,T,S)
        h_tilde = torch.tanh(self.W_c(torch.cat([context, h], dim=-1)))  # tanh(W_c[c_t; h_t])
        return h_tilde, weights

    # -- LSTM step with concatenated weights (kernels/lstm_steps.step_weights) -----------------
    def _lstm_step(
        self,
        emb_gates: torch.Tensor,
        feed: torch.Tensor | None,
        h: list[torch.Tensor],
        c: list[torch.Tensor],
        weights: list[tuple[torch.Tensor, torch.Tensor]],
    ) -> torch.Tensor:
        """One time step through all layers; updates h, c (lists of (B, H)) in place, returns top h."""
        x = feed
        for layer, (w, b) in enumerate(weights):
            inp = h[layer] if x is None else torch.cat([x, h[layer]], dim=-1)
            gates = F.linear(inp, w, b)
            if layer == 0:
                gates = gates + emb_gates
            i, f, g, o = gates.chunk(4, dim=-1)
            c[layer] = torch.sigmoid(f) * c[layer] + torch.sigmoid(i) * torch.tanh(g)
            h[layer] = torch.sigmoid(o) * torch.tanh(c[layer])
            x = self.dropout(h[layer]) if layer < self.layers - 1 else h[layer]
        return x

    # -- search: one step without autograd is kernels/lstm_steps.infer_step -----------------
    # search only: the output layer W_s as an 8-bit product (packed.pack_int8; `translate --int8`)
    int8_output = False
    # search only: every packed product in bfloat16 (`translate --bf16`, CPUs with bfloat16 units)
    bf16_search = False

    # -- run a block of target steps --------------------------------------------------------
    def forward(
        self,
        tgt_in: torch.Tensor,
        state: dict[str, torch.Tensor],
        memory: Memory | None,
        start: int = 0,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor | None]:
        """Decode T steps with the given inputs y_{t-1}.

        tgt_in: (B, T) input ids; state: {"h": (B, L, H), "c": (B, L, H), "feed": (B, H)};
        start: the absolute index of the first step (local-m's p_t = t).
        Returns logits (B, T, V), the new state, and attention weights (B, T, S) or None.
        """
        features, new_state, weights = self.features(tgt_in, state, memory, start, need_weights)
        return self.W_s(features), new_state, weights

    def features(
        self,
        tgt_in: torch.Tensor,
        state: dict[str, torch.Tensor],
        memory: Memory | None,
        start: int = 0,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor | None]:
        """``forward`` up to the output layer: returns the input of W_s, h̃_t after dropout
        (B, T, H), instead of the logits (a loss can then apply W_s to some positions only).

        Training on CPU takes a kernel where one applies (kernels/lstm_steps.py: the fused loop,
        the step loop); what follows is the reference, which they equal."""
        fast = lstm_steps.training_features(self, tgt_in, state, memory, start, need_weights)
        if fast is not None:
            return fast
        T = tgt_in.size(1)
        emb = self.dropout(self.embedding(tgt_in))  # (B, T, E)
        positions = torch.arange(start, start + T, device=tgt_in.device)
        if not self.input_feed:
            h0 = state["h"].transpose(0, 1).contiguous()  # (L, B, H)
            c0 = state["c"].transpose(0, 1).contiguous()
            top, (h_n, c_n) = self.rnn(emb, (h0, c0))  # top: (B, T, H)
            h_tilde, weights = self._attend(top, memory, positions, need_weights)
            new_state = {"h": h_n.transpose(0, 1), "c": c_n.transpose(0, 1), "feed": state["feed"]}
        else:
            w_ih0 = self.rnn.weight_ih_l0[:, : self.embed_dim]
            emb_gates = F.linear(emb, w_ih0)  # (B, T, 4H): layer 1's embedding half, all steps
            step_weights = lstm_steps.step_weights(self)  # [W_ih | W_hh] per layer
            h = list(state["h"].unbind(1))
            c = list(state["c"].unbind(1))
            feed = state["feed"]
            outputs, all_weights = [], []
            attend = (attention_steps.steps_for(self.attention, memory)
                      if self.attention is not None and memory is not None else None)
            # unbind, not emb_gates[:, t]: each slice's backward would write a zero (B, T, 4H)
            # gradient and add it up, T times; unbind's backward is one stack
            for t, emb_gates_t in enumerate(emb_gates.unbind(1)):
                top = self._lstm_step(emb_gates_t, feed, h, c, step_weights)  # (B, H)
                h_tilde_t, w_t = self._attend(
                    top.unsqueeze(1), memory, positions[t : t + 1], need_weights, attend
                )
                feed = self.dropout(h_tilde_t.squeeze(1))  # h̃_t, fed to step t+1
                outputs.append(feed)
                if w_t is not None and need_weights:
                    all_weights.append(w_t)
            h_tilde = torch.stack(outputs, dim=1)  # (B, T, H), dropout already applied
            weights = torch.cat(all_weights, dim=1) if all_weights else None
            new_state = {"h": torch.stack(h, 1), "c": torch.stack(c, 1), "feed": feed}
            return h_tilde, new_state, (weights if need_weights else None)
        return self.dropout(h_tilde), new_state, (weights if need_weights else None)
