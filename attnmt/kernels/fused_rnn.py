"""LSTM recurrences with a hand-written backward pass, for training on CPU.

Autograd over a Python loop of LSTM steps differentiates every step on its own: each step's
weight gradient is a rank-B product (B = batch rows) written and added into the weight's gradient,
T times per layer, and each step leaves a dozen autograd nodes. Here the forward loop runs without
autograd and saves what the backward needs; the backward loop does only the per-step work the
recurrence forces (one matrix product per layer and per attention step), and every weight gradient
is ONE product over all B·T rows at the end, e.g.

    ∂L/∂W = Σ_t ∂L/∂gates_tᵀ · [x_t; h_{t-1}]  =  (∂L/∂gates)ᵀ (4H × B·T) · [x; h_prev] (B·T × in+H)

Same functions, same gradients (tests/test_fused_rnn.py checks both against autograd); only the
order of floating-point sums differs. Used by the LSTM encoder and the input-feeding decoder with
dot/general/location attention when autograd is on, on CPU, outside autocast; with any other
attention the decoder runs ``StepLoop``: the attention stays with autograd between the steps, and
the LSTM stack and W_c get the same one-product weight gradients.

LSTM cell (PyTorch's gate order i, f, g, o):
    [i, f, g, o] = [σ, σ, tanh, σ](W [x_t; h_{t-1}] + b)
    c_t = f ⊙ c_{t-1} + i ⊙ g,    h_t = o ⊙ tanh(c_t)
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from attnmt.kernels.dispatch import Kernel
from attnmt.kernels.packed import linear, linear_add, mm, pack

# the definitions this module computes faster: the LSTM recurrences of the decoder and the encoder
IMPLEMENTS = ("attnmt.models.decoders.LuongDecoder", "attnmt.models.encoders.LSTMEncoder")


def dropout_mask(shape: tuple[int, ...], p: float, like: torch.Tensor) -> torch.Tensor:
    """Inverted-dropout multipliers: 1/(1-p) with probability 1-p, else 0 (torch.rand is about
    twice as fast as bernoulli_ on CPU)."""
    keep = 1.0 - p
    return torch.rand(shape, dtype=like.dtype, device=like.device).lt_(keep).div_(keep)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """F.dropout with masks from dropout_mask (autograd differentiates the product)."""
    return x * dropout_mask(x.shape, p, x) if training and p > 0 else x


def _cell(gates: torch.Tensor, c_prev: torch.Tensor, act: torch.Tensor, c: torch.Tensor, h: torch.Tensor) -> None:
    """One LSTM cell from its pre-activations (B, 4H) and c_{t-1}; writes the activated gates into
    ``act`` (B, 4H), c_t into ``c`` and h_t into ``h`` (B, H each; views of the callers' buffers)."""
    H = c_prev.size(1)
    torch.sigmoid(gates, out=act)  # i, f, o; g is overwritten with its tanh
    torch.tanh(gates[:, 2 * H : 3 * H], out=act[:, 2 * H : 3 * H])
    i, f, g, o = act.chunk(4, dim=1)
    torch.mul(f, c_prev, out=c)
    c.addcmul_(i, g)
    torch.mul(o, torch.tanh(c), out=h)


def _cell_backward(
    act: torch.Tensor, c: torch.Tensor, c_prev: torch.Tensor, dh: torch.Tensor, dc: torch.Tensor,
    d_gates: torch.Tensor,
) -> torch.Tensor:
    """Writes ∂L/∂(pre-activations) into ``d_gates`` (B, 4H) and returns ∂L/∂c_{t-1}, given ∂L/∂h_t
    and the part of ∂L/∂c_t that does not come through h_t."""
    H = c.size(1)
    i, f, g, o = act.chunk(4, dim=1)
    tanh_c = torch.tanh(c)
    dc = torch.addcmul(dc, dh * o, 1 - tanh_c * tanh_c)  # + ∂L/∂h_t · o · tanh'(c_t)
    sig = act * (1 - act)  # σ' for i, f, o (the g block is unused)
    torch.mul(dc * g, sig[:, :H], out=d_gates[:, :H])
    torch.mul(dc * c_prev, sig[:, H : 2 * H], out=d_gates[:, H : 2 * H])
    torch.mul(dc * i, 1 - g * g, out=d_gates[:, 2 * H : 3 * H])
    torch.mul(dh * tanh_c, sig[:, 3 * H :], out=d_gates[:, 3 * H :])
    return dc * f


# -- one LSTM layer over a whole sequence -------------------------------------------------------
class _LSTMLayer(torch.autograd.Function):
    """h_t and c_t for all t of one LSTM layer from a zero state, given the input half of the gates
    for all steps, proj = x W_ihᵀ + b (S, B, 4H), time-major, and the recurrent weights W_hh (4H, H)."""

    @staticmethod
    def forward(ctx, proj: torch.Tensor, w_hh: torch.Tensor):
        S, B, _ = proj.shape
        H = w_hh.size(1)
        w_p = pack(w_hh, B)
        acts = proj.new_empty(S, B, 4 * H)
        hs = proj.new_empty(S + 1, B, H)  # hs[t] = h_{t-1}; hs[0] = 0
        cs = proj.new_empty(S + 1, B, H)
        hs[0].zero_()
        cs[0].zero_()
        for t in range(S):
            _cell(linear_add(hs[t], w_p, proj[t]), cs[t], acts[t], cs[t + 1], hs[t + 1])
        ctx.save_for_backward(w_hh, acts, hs, cs)
        return hs[1:], cs[1:]  # (S, B, H) each

    @staticmethod
    @once_differentiable
    def backward(ctx, d_h: torch.Tensor, d_c: torch.Tensor):
        w_hh, acts, hs, cs = ctx.saved_tensors
        S, B, _ = acts.shape
        d_gates = torch.empty_like(acts)
        dh_next = torch.zeros_like(hs[0])
        dc_next = torch.zeros_like(cs[0])
        w_p = pack(w_hh.t(), B)
        for t in range(S - 1, -1, -1):
            dc_next = _cell_backward(acts[t], cs[t + 1], cs[t], d_h[t] + dh_next, d_c[t] + dc_next, d_gates[t])
            dh_next = linear(d_gates[t], w_p)  # ∂L/∂gates_t W_hh: (B, H)
        flat = d_gates.view(S * B, -1)
        d_w_hh = mm(flat.t(), hs[:S].reshape(S * B, -1))  # Σ_t ∂L/∂gates_tᵀ h_{t-1}: one product
        return d_gates, d_w_hh


def lstm_layer(proj: torch.Tensor, w_hh: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One LSTM layer from a zero state: proj = x W_ihᵀ + b_ih + b_hh (S, B, 4H), time-major, and
    W_hh (4H, H) -> h_t and c_t for every t, (S, B, H) each. Rows may be right-padded: padding
    comes after a row's last word, so it never reaches the states at real positions."""
    return _LSTMLayer.apply(proj, w_hh)


# -- the input-feeding decoder with dot/general/location attention ------------------------------
class _InputFeedingLoop(torch.autograd.Function):
    """Teacher-forced steps of the Luong decoder (models/decoders.py), t = 0 .. T-1:

        layer 0:  gates = emb_gates_t + W_0 [h̃_{t-1} ⊙ m_t ; h⁰_{t-1}]
        layer l:  gates = b_l + W_l [h^{l-1}_t ⊙ m^{l-1}_t ; h^l_{t-1}]
        a_t = softmax(K h_t + b),  c_t = a_tᵀ V,  h̃_t = tanh(W_c [c_t; h_t])

    with h_t the top layer's state, K = W_a h̄ (general), h̄ (dot) or the location score's rows
    of W_a, b its bias (location) or 0, and −inf outside the sentence, V = h̄, and dropout masks m
    drawn once for all steps. Returns the dropped-out h̃_t for all t (B, T, H) — the input of the
    output layer — and the final state (not differentiable)."""

    @staticmethod
    def forward(ctx, emb_gates, h0, c0, feed0, keys, values, score_bias, w_c, p, n_layers, *params):
        T, B, _ = emb_gates.shape
        L, H, d_mem = n_layers, h0.size(2), values.size(2)
        weights, biases = params[:L], (None,) + params[L:]
        feed_mask = dropout_mask((T, B, H), p, emb_gates) if p > 0 else None
        layer_masks = dropout_mask((L - 1, T, B, H), p, emb_gates) if p > 0 and L > 1 else None
        emb_t = emb_gates  # (T, B, 4H), time-major
        # inputs[l][t] = [x^l_t ; h^l_{t-1}] (T+1, B, in+H): each cell writes its h_t straight into
        # the next step's slot and (dropped out) into the layer above's; acts: activated gates;
        # cs[l][t] = c^l_{t-1}
        inputs = [emb_gates.new_empty(T + 1, B, w.size(1)) for w in weights]
        acts = [emb_gates.new_empty(T, B, 4 * H) for _ in range(L)]
        cs = [emb_gates.new_empty(T + 1, B, H) for _ in range(L)]
        attn = emb_gates.new_empty(T, B, keys.size(1))
        ctx_top = emb_gates.new_empty(T, B, d_mem + H)  # [c_t; h_t], the input of W_c
        h_tilde = emb_gates.new_empty(T, B, H)
        features = emb_gates.new_empty(T, B, H)
        n_in = [w.size(1) - H for w in weights]
        for layer in range(L):
            inputs[layer][0][:, n_in[layer] :] = h0[:, layer]
            cs[layer][0] = c0[:, layer]
        inputs[0][0][:, : n_in[0]] = feed0
        keys_t = keys.transpose(1, 2)  # (B, d, S): h_t K^T as a row-vector product is the fast bmm
        w_p = [pack(w, B) for w in weights]
        w_c_p = pack(w_c, B)
        for t in range(T):
            for layer in range(L):
                h = inputs[layer][t + 1][:, n_in[layer] :]
                if layer == 0:
                    gates = linear_add(inputs[0][t], w_p[0], emb_t[t])
                else:
                    gates = linear(inputs[layer][t], w_p[layer], biases[layer])
                _cell(gates, cs[layer][t], acts[layer][t], cs[layer][t + 1], h)
                if layer < L - 1:
                    above = inputs[layer + 1][t][:, : n_in[layer + 1]]
                    if layer_masks is None:
                        above.copy_(h)
                    else:
                        torch.mul(h, layer_masks[layer][t], out=above)
            cat = ctx_top[t]
            cat[:, d_mem:] = h  # the top layer's h_t
            scores = torch.baddbmm(score_bias, cat[:, d_mem:].unsqueeze(1), keys_t)  # K h_t + b
            a = torch.softmax(scores, dim=2)  # (B, 1, S)
            attn[t] = a.squeeze(1)
            cat[:, :d_mem] = torch.bmm(a, values).squeeze(1)  # c_t
            torch.tanh(linear(cat, w_c_p), out=h_tilde[t])
            if feed_mask is None:
                features[t] = h_tilde[t]
            else:
                torch.mul(h_tilde[t], feed_mask[t], out=features[t])
            inputs[0][t + 1][:, : n_in[0]] = features[t]
        ctx.save_for_backward(keys, values, w_c, attn, ctx_top, h_tilde, *weights, *inputs, *acts, *cs)
        ctx.masks = (feed_mask, layer_masks)
        ctx.n_layers = L
        h_n = torch.stack([inputs[layer][T][:, n_in[layer] :] for layer in range(L)], 1)
        c_n = torch.stack([c[T] for c in cs], 1)
        ctx.mark_non_differentiable(h_n, c_n)
        return features.transpose(0, 1).contiguous(), h_n, c_n

    @staticmethod
    @once_differentiable
    def backward(ctx, d_features, _d_h, _d_c):
        L = ctx.n_layers
        keys, values, w_c, attn, ctx_top, h_tilde, *rest = ctx.saved_tensors
        weights, inputs, acts, cs = rest[:L], rest[L : 2 * L], rest[2 * L : 3 * L], rest[3 * L :]
        feed_mask, layer_masks = ctx.masks
        T, B, H = h_tilde.shape
        d_mem = values.size(2)
        n_in = [w.size(1) - H for w in weights]
        d_feat = d_features.transpose(0, 1)  # (T, B, H)
        d_gates = [torch.empty_like(a) for a in acts]
        d_pre = torch.empty_like(h_tilde)  # ∂L/∂(W_c [c_t; h_t])
        d_cat = torch.empty_like(ctx_top)  # ∂L/∂[c_t; h_t]
        d_scores = torch.empty_like(attn)
        values_t = values.transpose(1, 2)  # (B, d, S)
        w_p = [pack(w.t(), B) for w in weights]
        w_c_p = pack(w_c.t(), B)
        dh = [h_tilde.new_zeros(B, H) for _ in range(L)]  # ∂L/∂h^l_t from step t+1
        dc = [h_tilde.new_zeros(B, H) for _ in range(L)]
        d_feed = h_tilde.new_zeros(B, H)  # ∂L/∂(fed h̃_t) from step t+1
        for t in range(T - 1, -1, -1):
            d_ht = d_feat[t] + d_feed
            if feed_mask is not None:
                d_ht.mul_(feed_mask[t])
            torch.mul(d_ht, 1 - h_tilde[t] * h_tilde[t], out=d_pre[t])
            d_cat[t] = linear(d_pre[t], w_c_p)  # ∂L/∂(W_c [c_t; h_t]) W_c
            a = attn[t].unsqueeze(1)  # (B, 1, S)
            d_a = torch.bmm(d_cat[t][:, :d_mem].unsqueeze(1), values_t)  # (B, 1, S)
            d_s = a * (d_a - (a * d_a).sum(2, keepdim=True))
            d_scores[t] = d_s.squeeze(1)
            d_x = d_cat[t][:, d_mem:] + torch.bmm(d_s, keys).squeeze(1)  # ∂L/∂h_t of the top layer
            for layer in range(L - 1, -1, -1):
                dc[layer] = _cell_backward(
                    acts[layer][t], cs[layer][t + 1], cs[layer][t], d_x + dh[layer], dc[layer], d_gates[layer][t]
                )
                d_inp = linear(d_gates[layer][t], w_p[layer])  # ∂L/∂gates W_l: (B, in + H)
                dh[layer] = d_inp[:, n_in[layer] :]
                d_x = d_inp[:, : n_in[layer]]
                if layer > 0 and layer_masks is not None:
                    d_x = d_x * layer_masks[layer - 1][t]
            d_feed = d_x
        # the weight gradients of all steps, one product each
        d_weights = [
            mm(d_gates[layer].view(T * B, -1).t(), inputs[layer][:T].reshape(T * B, -1)) for layer in range(L)
        ]
        d_biases = [d_gates[layer].sum((0, 1)) for layer in range(1, L)]
        d_w_c = mm(d_pre.view(T * B, H).t(), ctx_top.view(T * B, -1))
        top = ctx_top[..., d_mem:].transpose(0, 1)  # (B, T, H)
        d_keys = torch.bmm(d_scores.permute(1, 2, 0), top)  # Σ_t ∂L/∂s_tᵀ h_t: (B, S, H)
        d_values = torch.bmm(attn.permute(1, 2, 0), d_cat[..., :d_mem].transpose(0, 1))  # Σ_t a_tᵀ ∂L/∂c_t
        d_bias = d_scores.sum(0).unsqueeze(1) if ctx.needs_input_grad[6] else None  # (B, 1, S)
        d_h0 = torch.stack(dh, 1)
        d_c0 = torch.stack(dc, 1)
        return (d_gates[0], d_h0, d_c0, d_feed, d_keys, d_values, d_bias, d_w_c, None, None,
                *d_weights, *d_biases)


def input_feeding_loop(
    emb_gates: torch.Tensor,
    h0: torch.Tensor,
    c0: torch.Tensor,
    feed0: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    score_bias: torch.Tensor,
    w_c: torch.Tensor,
    weights: list[torch.Tensor],
    biases: list[torch.Tensor],
    dropout: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run the input-feeding decoder over all T target steps (see _InputFeedingLoop).

    emb_gates (T, B, 4H), time-major: layer 0's embedding half of the gates plus its bias;
    h0, c0 (B, L, H);
    feed0 (B, H): the h̃ fed to the first step;
    keys, values (B, S, d); score_bias (B, 1, S): added to the scores, −inf outside the sentence
    (GlobalAttention.dot_scores); w_c (H, d + H); weights[l] = [W_ih | W_hh] of layer l
    (layer 0 without its embedding columns); biases[l - 1] = b_ih + b_hh of layer l ≥ 1.
    Returns h̃ after dropout (B, T, H) and the final (h, c), (B, L, H) each."""
    return _InputFeedingLoop.apply(
        emb_gates, h0, c0, feed0, keys, values, score_bias, w_c, float(dropout), len(weights),
        *weights, *biases,
    )


# -- the input-feeding decoder with any attention, one step at a time ---------------------------
class StepLoop:
    """The LSTM stack and the attentional layer of the input-feeding decoder, for an attention
    that runs between them with autograd (local, concat, or when its weights are wanted):

        layer 0:  gates = emb_gates_t + W_0 [h̃_{t-1} ; h⁰_{t-1}]      (emb_gates: E half + b_0)
        layer l:  gates = b_l + W_l [h^{l-1}_t ⊙ m^{l-1}_t ; h^l_{t-1}]
        c_t, a_t = attention(h_t, memory)                              (outside, autograd)
        h̃_t = tanh(W_c [c_t ; h_t])

    Each step is one autograd node for the stack (``lstm``) and one for h̃_t (``attentional``),
    whose backward does only the work the recurrence forces: ∂L/∂inputs, one product per layer.
    The weight gradients Σ_t ∂L/∂gates_tᵀ [x_t ; h_{t-1}] are one product each over all B·T
    rows, formed by step 0's backward, which runs last (every later step depends on its
    outputs); autograd over a plain loop writes and adds a rank-B gradient T times per weight.
    Products go through kernels/packed.py, in bfloat16 where ``bf16_products`` is on. Inter-layer
    dropout masks m are drawn per step (rate ``dropout``)."""

    def __init__(self, weights: list[torch.Tensor], biases: list[torch.Tensor], w_c: torch.Tensor,
                 dropout: float, rows: int):
        self.weights, self.biases, self.w_c, self.p, self.rows = weights, biases, w_c, dropout, rows
        self.packed = [pack(w, rows) for w in weights]
        self.w_c_packed = pack(w_c, rows)
        self.packed_t: list | None = None  # Wᵀ for the backward, packed by its first call
        self.w_c_t = None
        self.inputs: list[list[torch.Tensor]] = [[] for _ in weights]  # left by each backward
        self.d_gates: list[list[torch.Tensor]] = [[] for _ in weights]
        self.cats: list[torch.Tensor] = []
        self.d_pres: list[torch.Tensor] = []
        self.steps = 0

    def lstm(self, emb_gates_t: torch.Tensor, feed: torch.Tensor, h: list[torch.Tensor],
             c: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """One step of the stack: emb_gates_t (B, 4H), h̃_{t-1} (B, H), h and c per layer ->
        the new h and c per layer."""
        self.steps += 1
        L = len(self.weights)
        out = _LSTMStep.apply(self, self.steps == 1, emb_gates_t, feed, *h, *c, *self.weights,
                              *self.biases)
        return list(out[:L]), list(out[L:])

    def attentional(self, context: torch.Tensor, top: torch.Tensor) -> torch.Tensor:
        """h̃_t = tanh(W_c [c_t ; h_t]) for c_t (B, d) and h_t (B, H)."""
        return _AttentionalStep.apply(self, self.steps == 1, context, top, self.w_c)


class _LSTMStep(torch.autograd.Function):
    @staticmethod
    def forward(ctx, loop, first, emb_gates_t, feed, *tensors):
        L = len(loop.weights)
        h_prev, c_prev = tensors[:L], tensors[L : 2 * L]
        B, H = feed.size(0), h_prev[0].size(1)
        x, inputs, acts, hs, cs, masks = feed, [], [], [], [], []
        for layer in range(L):
            inp = torch.cat([x, h_prev[layer]], dim=1)  # [x_t ; h_{t-1}]
            if layer == 0:
                gates = linear_add(inp, loop.packed[0], emb_gates_t)
            else:
                gates = linear(inp, loop.packed[layer], loop.biases[layer - 1])
            act, c, h = torch.empty_like(gates), feed.new_empty(B, H), feed.new_empty(B, H)
            _cell(gates, c_prev[layer], act, c, h)
            inputs.append(inp)
            acts.append(act)
            hs.append(h)
            cs.append(c)
            if layer < L - 1:
                masks.append(dropout_mask((B, H), loop.p, h) if loop.p > 0 else None)
                x = h if masks[-1] is None else h * masks[-1]
        ctx.loop, ctx.first, ctx.inputs, ctx.acts, ctx.masks = loop, first, inputs, acts, masks
        ctx.save_for_backward(*c_prev, *cs)
        return (*hs, *cs)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        loop = ctx.loop
        L = len(loop.weights)
        saved = ctx.saved_tensors
        c_prev, cs = saved[:L], saved[L:]
        H = cs[0].size(1)
        if loop.packed_t is None:
            loop.packed_t = [pack(w.t(), loop.rows) for w in loop.weights]
        zero = cs[0].new_zeros(cs[0].shape)
        d_h_prev, d_c_prev = [None] * L, [None] * L
        d_x = None
        for layer in range(L - 1, -1, -1):
            dh = grads[layer] if grads[layer] is not None else zero
            if d_x is not None:
                dh = dh + d_x
            dc = grads[L + layer] if grads[L + layer] is not None else zero
            d_gates = torch.empty_like(ctx.acts[layer])
            d_c_prev[layer] = _cell_backward(ctx.acts[layer], cs[layer], c_prev[layer], dh, dc,
                                             d_gates)
            d_inp = linear(d_gates, loop.packed_t[layer])  # ∂L/∂gates W_l: (B, in + H)
            n_in = d_inp.size(1) - H
            d_h_prev[layer], d_x = d_inp[:, n_in:], d_inp[:, :n_in]
            if layer > 0 and ctx.masks[layer - 1] is not None:
                d_x = d_x * ctx.masks[layer - 1]
            loop.inputs[layer].append(ctx.inputs[layer])
            loop.d_gates[layer].append(d_gates)
        d_emb = loop.d_gates[0][-1]
        d_weights, d_biases = [None] * L, [None] * (L - 1)
        if ctx.first:  # every later step's backward has run: Σ_t, one product per weight
            d_all = [torch.cat(d) for d in loop.d_gates]
            d_weights = [mm(d_all[layer].t(), torch.cat(loop.inputs[layer]))
                         for layer in range(L)]
            d_biases = [d_all[layer].sum(0) for layer in range(1, L)]
            loop.inputs, loop.d_gates = [[] for _ in range(L)], [[] for _ in range(L)]
        return (None, None, d_emb, d_x, *d_h_prev, *d_c_prev, *d_weights, *d_biases)


class _AttentionalStep(torch.autograd.Function):
    @staticmethod
    def forward(ctx, loop, first, context, top, w_c):
        cat = torch.cat([context, top], dim=1)  # [c_t ; h_t]
        h_tilde = torch.tanh(linear(cat, loop.w_c_packed))
        ctx.loop, ctx.first, ctx.cat, ctx.d = loop, first, cat, context.size(1)
        ctx.save_for_backward(h_tilde)
        return h_tilde

    @staticmethod
    @once_differentiable
    def backward(ctx, d_h_tilde):
        loop = ctx.loop
        (h_tilde,) = ctx.saved_tensors
        d_pre = d_h_tilde * (1 - h_tilde * h_tilde)  # ∂L/∂(W_c [c_t ; h_t])
        if loop.w_c_t is None:
            loop.w_c_t = pack(loop.w_c.t(), loop.rows)
        d_cat = linear(d_pre, loop.w_c_t)
        loop.cats.append(ctx.cat)
        loop.d_pres.append(d_pre)
        d_w_c = None
        if ctx.first:
            d_w_c = mm(torch.cat(loop.d_pres).t(), torch.cat(loop.cats))
            loop.cats, loop.d_pres = [], []
        return None, None, d_cat[:, : ctx.d], d_cat[:, ctx.d :], d_w_c


KERNELS = (Kernel("fused_rnn.lstm_layer", "encoder", IMPLEMENTS[1], "every LSTM encoder",
                   lambda encoder: (True, ""), ("cpu",), lstm_layer),)
