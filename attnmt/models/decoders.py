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
from attnmt.kernels import packed
from attnmt.kernels.cache import derived, drop
from attnmt.kernels.fused_rnn import StepLoop, dropout, input_feeding_loop
from attnmt.kernels.packed import product


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
        step function over ``memory`` (see GlobalAttention.steps), if it has one."""
        if self.attention is None:
            return h, None
        if attend is not None:
            context, weights = attend(h, positions, need_weights)
        else:
            context, weights = self.attention(h, memory, positions, need_weights)  # (B,T,d), (B,T,S)
        h_tilde = torch.tanh(self.W_c(torch.cat([context, h], dim=-1)))  # tanh(W_c[c_t; h_t])
        return h_tilde, weights

    # -- LSTM step with concatenated weights -------------------------------------------------
    def _step_weights(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer: W = [W_ih_rest | W_hh] and b = b_ih + b_hh, for one matmul per layer per step.
        For layer 1, W_ih_rest is the input-feeding half (the embedding half is precomputed).

        Without autograd (decoding calls forward once per step) they are kept until a weight
        changes (kernels/cache.py)."""
        if torch.is_grad_enabled():
            drop(self, "step_weights")  # training: don't hold a stale copy
            return self._concat_weights()
        return derived(self, "step_weights", list(self.rnn.parameters()), self._concat_weights)

    def _concat_weights(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        out = []
        for layer in range(self.layers):
            w_ih = getattr(self.rnn, f"weight_ih_l{layer}")
            w_hh = getattr(self.rnn, f"weight_hh_l{layer}")
            bias = getattr(self.rnn, f"bias_ih_l{layer}") + getattr(self.rnn, f"bias_hh_l{layer}")
            if layer == 0:
                w_ih = w_ih[:, self.embed_dim :]
            out.append((torch.cat([w_ih, w_hh], dim=1), bias))
        return out

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

    # -- search: one step without autograd (with or without input feeding) -------------------
    def infer_step(
        self, y_prev: torch.Tensor, state: dict[str, torch.Tensor], memory: Memory | None, t: int,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor | None]:
        """``forward`` for one step in eval mode without autograd: y_prev (B,) -> logits (B, V),
        the new state, a_t (B, S) or None. Each layer is one product with packed weights (layer
        1: [h̃_{t-1}; h¹_{t-1}] plus the word's row of the embedding-gate table, or [emb(y);
        h̃_{t-1}; h¹_{t-1}] at once without the table; without input feeding, h̃_{t-1} is not
        among them)."""
        layers, emb_gates, W_c, W_s = self._inference_weights()
        looked_up = None  # layer 1's embedding half and bias, one table row per word
        feed = state["feed"] if self.input_feed else None
        if emb_gates is not None:
            x, looked_up = feed, emb_gates.index_select(0, y_prev)
        else:
            x = self.embedding(y_prev)
            x = x if feed is None else torch.cat([x, feed], dim=1)
        hs, cs = [], []
        H = self.hidden
        # tanh(z) = 2σ(2z) − 1: on CPU σ is several times cheaper than tanh, and the factor 2
        # of the g gate and of W_c is folded into their packed weights
        for layer, (w, b) in enumerate(layers):
            inp = state["h"][:, layer] if x is None else torch.cat([x, state["h"][:, layer]], dim=1)
            if looked_up is not None:  # layer 1 with the table (its bias is in the table)
                z, looked_up = packed.linear_add(inp, w, looked_up), None
            else:
                z = packed.linear(inp, w, b)
            act = torch.sigmoid(z)
            g = act[:, 2 * H : 3 * H].mul(2).sub_(1)
            c = torch.addcmul(act[:, H : 2 * H] * state["c"][:, layer], act[:, :H], g)
            x = act[:, 3 * H :] * torch.sigmoid(c * 2).mul_(2).sub_(1)
            hs.append(x)
            cs.append(c)
        weights = None
        if self.attention is not None:
            top = x.unsqueeze(1)
            positions = torch.tensor([t], device=x.device)
            context, weights = self.attention(top, memory, positions, need_weights)  # (B, 1, d)
            x = torch.sigmoid(packed.linear(torch.cat([context, top], dim=-1), W_c)).squeeze(1)
            x = x.mul_(2).sub_(1)
        logits = packed.linear(x, W_s, self.W_s.bias)
        new_state = {"h": torch.stack(hs, 1), "c": torch.stack(cs, 1),
                     "feed": x if self.input_feed else state["feed"]}
        return logits, new_state, (weights[:, 0] if weights is not None and need_weights else None)

    # the largest table of layer-1 embedding gates kept for search (V × 4H floats)
    EMB_GATES_MAX_BYTES = 128 * 2**20
    # search only: the output layer W_s as an 8-bit product (packed.pack_int8; `translate --int8`)
    int8_output = False
    # search only: every packed product in bfloat16 (`translate --bf16`, CPUs with bfloat16 units)
    bf16_search = False

    def _inference_weights(self):
        """Packed [W_ih | W_hh] and b_ih + b_hh per layer, the embedding-gate table, W_c and W_s,
        kept until a weight changes (kernels/cache.py).

        The table holds W_ih[:, :E] emb(y) + b_ih + b_hh for every word y (V × 4H): a search
        step looks its rows up instead of multiplying the embedding half of layer 1 (E of the
        E + 2H inputs) again for every hypothesis. Left out (None) when it would exceed
        EMB_GATES_MAX_BYTES; layer 1 then multiplies [emb(y); h̃; h] as one product."""
        params = list(self.rnn.parameters()) + list(self.W_s.parameters()) + [self.embedding.weight]
        params += list(self.W_c.parameters()) if self.W_c is not None else []
        return derived(self, "inference_weights", params, self._pack_inference_weights,
                       (self.int8_output, self.bf16_search))

    def _pack_inference_weights(self):
        layers, H, E = [], self.hidden, self.embed_dim
        V = self.embedding.num_embeddings
        table_fits = 4 * H * V * self.embedding.weight.element_size() <= self.EMB_GATES_MAX_BYTES
        emb_gates = None
        for layer in range(self.layers):
            w = torch.cat([getattr(self.rnn, f"weight_ih_l{layer}"), getattr(self.rnn, f"weight_hh_l{layer}")], 1)
            b = getattr(self.rnn, f"bias_ih_l{layer}") + getattr(self.rnn, f"bias_hh_l{layer}")
            w, b = w.detach().clone(), b.detach().clone()
            w[2 * H : 3 * H] *= 2  # the g gate: tanh(z) = 2σ(2z) − 1
            b[2 * H : 3 * H] *= 2
            if layer == 0 and table_fits:
                emb_gates = torch.addmm(b, self.embedding.weight.detach(), w[:, :E].t())  # (V, 4H)
                w = w[:, E:]
            layers.append((packed.pack(w, 320, self.bf16_search, few_rows=True), b))
        W_c = (packed.pack(2 * self.W_c.weight.detach(), 320, self.bf16_search, few_rows=True)
               if self.W_c is not None else None)
        if self.int8_output:
            W_s = packed.pack_int8(self.W_s.weight, 320)
        else:
            W_s = packed.pack(self.W_s.weight, 320, self.bf16_search, few_rows=True)
        return layers, emb_gates, W_c, W_s

    # -- training on CPU: the whole input-feeding loop with a hand-written backward ------------
    def _fusable(self, memory: Memory | None, need_weights: bool) -> bool:
        """Teacher forcing with autograd on CPU, outside autocast, with an attention whose score is
        a dot product with keys plus a bias (global dot/general/location): kernels/fused_rnn.py
        applies."""
        return (
            torch.is_grad_enabled()
            and not need_weights
            and memory is not None
            and memory.keys.device.type == "cpu"
            and not torch.is_autocast_enabled("cpu")
            and getattr(self.attention, "dot_product_scores", False)
        )

    def _loop_weights(
        self, emb: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        """For the CPU training loops (fused_rnn): layer 1's embedding half of the gates plus its
        bias, W_ih[:, :E] emb + b_ih + b_hh for all steps; per layer W = [W_ih | W_hh] (layer 1
        without its embedding columns); b_ih + b_hh of layers 2..L."""
        rnn, E = self.rnn, self.embed_dim
        emb_gates = product(emb, rnn.weight_ih_l0[:, :E], rnn.bias_ih_l0 + rnn.bias_hh_l0)
        weights = [torch.cat([rnn.weight_ih_l0[:, E:], rnn.weight_hh_l0], dim=1)]
        biases = []
        for layer in range(1, self.layers):
            w_ih, w_hh = getattr(rnn, f"weight_ih_l{layer}"), getattr(rnn, f"weight_hh_l{layer}")
            weights.append(torch.cat([w_ih, w_hh], dim=1))
            biases.append(getattr(rnn, f"bias_ih_l{layer}") + getattr(rnn, f"bias_hh_l{layer}"))
        return emb_gates, weights, biases

    def _fused_features(
        self, tgt_in: torch.Tensor, state: dict[str, torch.Tensor], memory: Memory
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], None]:
        """``features`` through fused_rnn.input_feeding_loop: the same function and gradients."""
        emb = dropout(self.embedding(tgt_in.t()), self.dropout.p, self.training)  # (T, B, E): time-major
        emb_gates, weights, biases = self._loop_weights(emb)
        p = self.dropout.p if self.training else 0.0
        keys, score_bias = self.attention.dot_scores(memory)
        features, h_n, c_n = input_feeding_loop(
            emb_gates, state["h"], state["c"], state["feed"], keys, memory.values,
            score_bias, self.W_c.weight, weights, biases, p,
        )
        return features, {"h": h_n, "c": c_n, "feed": features[:, -1]}, None

    def _stepped_features(
        self, tgt_in: torch.Tensor, state: dict[str, torch.Tensor], memory: Memory, start: int,
        need_weights: bool,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor | None]:
        """``features`` for any attention with the LSTM stack and W_c of fused_rnn.StepLoop (the
        weight gradients formed once for all steps): the same function and gradients."""
        T = tgt_in.size(1)
        emb = self.dropout(self.embedding(tgt_in))  # (B, T, E)
        emb_gates, weights, biases = self._loop_weights(emb)
        p = self.dropout.p if self.training else 0.0
        loop = StepLoop(weights, biases, self.W_c.weight, p, tgt_in.size(0))
        positions = torch.arange(start, start + T, device=tgt_in.device)
        steps = getattr(self.attention, "steps", None)
        attend = steps(memory) if steps is not None else (
            lambda query, positions, need_weights: self.attention(query, memory, positions,
                                                                  need_weights))
        h, c, feed = list(state["h"].unbind(1)), list(state["c"].unbind(1)), state["feed"]
        outputs, all_weights = [], []
        for t, emb_gates_t in enumerate(emb_gates.unbind(1)):  # unbind: see features
            h, c = loop.lstm(emb_gates_t, feed, h, c)
            context, w_t = attend(h[-1].unsqueeze(1), positions[t : t + 1], need_weights)
            feed = self.dropout(loop.attentional(context.squeeze(1), h[-1]))  # h̃_t, fed to t+1
            outputs.append(feed)
            if need_weights and w_t is not None:
                all_weights.append(w_t)
        weights_out = torch.cat(all_weights, dim=1) if all_weights else None
        new_state = {"h": torch.stack(h, 1), "c": torch.stack(c, 1), "feed": feed}
        return torch.stack(outputs, dim=1), new_state, weights_out

    def _steppable(self, memory: Memory | None) -> bool:
        """Teacher forcing with autograd on CPU, outside autocast, with an attention: StepLoop."""
        return (
            torch.is_grad_enabled()
            and memory is not None
            and self.attention is not None
            and memory.values.device.type == "cpu"
            and not torch.is_autocast_enabled("cpu")
        )

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
        (B, T, H), instead of the logits (a loss can then apply W_s to some positions only)."""
        if self.input_feed and self._fusable(memory, need_weights):
            return self._fused_features(tgt_in, state, memory)
        if self.input_feed and self._steppable(memory):
            return self._stepped_features(tgt_in, state, memory, start, need_weights)
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
            step_weights = self._step_weights()
            h = list(state["h"].unbind(1))
            c = list(state["c"].unbind(1))
            feed = state["feed"]
            outputs, all_weights = [], []
            steps = getattr(self.attention, "steps", None)
            attend = steps(memory) if steps is not None and memory is not None else None
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
