"""The Luong decoder's kernels (models/decoders.py, ``LuongDecoder``): its CPU training loops and
its search step, with the [W_ih | W_hh] concatenations each of them multiplies by.

Training (autograd on, CPU, outside autocast, input feeding), ``training_features``:

    fused_rnn.input_feeding_loop   the whole loop in one autograd node, for global attention
                                   with a dot, general or location score (h_tᵀ k_s + b_s)
    fused_rnn.StepLoop             any other attention: it stays with autograd between the
                                   steps (or its own steps kernel, attention_steps), the LSTM
                                   stack and W_c form their weight gradients once for all steps

Search (autograd off, eval mode), ``infer_step``: one product per layer on weights packed once
per model (kernels/packed.py; kept by kernels/cache.py), layer 1's embedding half looked up in a
table of embedding gates, tanh as 2σ(2z) − 1 with the factor 2 folded into the packed weights.
Elsewhere (CUDA, autocast, validation) the decoder's own loop runs: the reference.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from attnmt.kernels import attention_steps, packed
from attnmt.kernels.cache import derived, drop
from attnmt.kernels.dispatch import Kernel, choose, is_definition
from attnmt.kernels.fused_rnn import StepLoop, dropout, input_feeding_loop
from attnmt.kernels.packed import product

# attnmt.attention.base.Memory (kernels import no definitions)
Memory = Any

DECODER = "attnmt.models.decoders.LuongDecoder"
IMPLEMENTS = (DECODER,)

# the largest table of layer-1 embedding gates kept for search (V × 4H floats)
EMB_GATES_MAX_BYTES = 128 * 2**20


def training_features(
    decoder: nn.Module, tgt_in: torch.Tensor, state: dict[str, torch.Tensor], memory: Memory | None,
    start: int, need_weights: bool,
) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor | None] | None:
    """``LuongDecoder.features`` through this call's training kernel, or None where none
    applies (the decoder's reference loop then runs)."""
    if decoder.input_feed and fusable(decoder, memory, need_weights):
        return fused_features(decoder, tgt_in, state, memory)
    if decoder.input_feed and steppable(decoder, memory):
        return stepped_features(decoder, tgt_in, state, memory, start, need_weights)
    return None


def step_weights(decoder: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer: W = [W_ih_rest | W_hh] and b = b_ih + b_hh, for one matmul per layer per step.
    For layer 1, W_ih_rest is the input-feeding half (the embedding half is precomputed).

    Without autograd (decoding calls forward once per step) they are kept until a weight
    changes (kernels/cache.py)."""
    if torch.is_grad_enabled():
        drop(decoder, "step_weights")  # training: don't hold a stale copy
        return concat_weights(decoder)
    return derived(decoder, "step_weights", list(decoder.rnn.parameters()),
                   lambda: concat_weights(decoder))


def concat_weights(decoder: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``step_weights``, made now."""
    out = []
    for layer in range(decoder.layers):
        w_ih = getattr(decoder.rnn, f"weight_ih_l{layer}")
        w_hh = getattr(decoder.rnn, f"weight_hh_l{layer}")
        bias = getattr(decoder.rnn, f"bias_ih_l{layer}") + getattr(decoder.rnn, f"bias_hh_l{layer}")
        if layer == 0:
            w_ih = w_ih[:, decoder.embed_dim :]
        out.append((torch.cat([w_ih, w_hh], dim=1), bias))
    return out


def infer_step(
    decoder: nn.Module, y_prev: torch.Tensor, state: dict[str, torch.Tensor], memory: Memory | None,
    t: int, need_weights: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor | None]:
    """``LuongDecoder.forward`` for one step in eval mode without autograd: y_prev (B,) -> logits (B, V),
    the new state, a_t (B, S) or None. Each layer is one product with packed weights (layer
    1: [h̃_{t-1}; h¹_{t-1}] plus the word's row of the embedding-gate table, or [emb(y);
    h̃_{t-1}; h¹_{t-1}] at once without the table; without input feeding, h̃_{t-1} is not
    among them)."""
    layers, emb_gates, W_c, W_s = inference_weights(decoder)
    looked_up = None  # layer 1's embedding half and bias, one table row per word
    feed = state["feed"] if decoder.input_feed else None
    if emb_gates is not None:
        x, looked_up = feed, emb_gates.index_select(0, y_prev)
    else:
        x = decoder.embedding(y_prev)
        x = x if feed is None else torch.cat([x, feed], dim=1)
    hs, cs = [], []
    H = decoder.hidden
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
    if decoder.attention is not None:
        top = x.unsqueeze(1)
        positions = torch.tensor([t], device=x.device)
        context, weights = decoder.attention(top, memory, positions, need_weights)  # (B, 1, d)
        x = torch.sigmoid(packed.linear(torch.cat([context, top], dim=-1), W_c)).squeeze(1)
        x = x.mul_(2).sub_(1)
    logits = packed.linear(x, W_s, decoder.W_s.bias)
    new_state = {"h": torch.stack(hs, 1), "c": torch.stack(cs, 1),
                 "feed": x if decoder.input_feed else state["feed"]}
    return logits, new_state, (weights[:, 0] if weights is not None and need_weights else None)


def inference_weights(decoder: nn.Module):
    """Packed [W_ih | W_hh] and b_ih + b_hh per layer, the embedding-gate table, W_c and W_s,
    kept until a weight changes (kernels/cache.py).

    The table holds W_ih[:, :E] emb(y) + b_ih + b_hh for every word y (V × 4H): a search
    step looks its rows up instead of multiplying the embedding half of layer 1 (E of the
    E + 2H inputs) again for every hypothesis. Left out (None) when it would exceed
    EMB_GATES_MAX_BYTES; layer 1 then multiplies [emb(y); h̃; h] as one product."""
    params = [*decoder.rnn.parameters(), *decoder.W_s.parameters(), decoder.embedding.weight]
    params += list(decoder.W_c.parameters()) if decoder.W_c is not None else []
    return derived(decoder, "inference_weights", params, lambda: _pack_inference_weights(decoder),
                   (decoder.int8_output, decoder.bf16_search))


def _pack_inference_weights(decoder: nn.Module):
    layers, H, E = [], decoder.hidden, decoder.embed_dim
    V = decoder.embedding.num_embeddings
    table_fits = 4 * H * V * decoder.embedding.weight.element_size() <= EMB_GATES_MAX_BYTES
    emb_gates = None
    for layer in range(decoder.layers):
        w = torch.cat([getattr(decoder.rnn, f"weight_ih_l{layer}"),
                       getattr(decoder.rnn, f"weight_hh_l{layer}")], 1)
        b = getattr(decoder.rnn, f"bias_ih_l{layer}") + getattr(decoder.rnn, f"bias_hh_l{layer}")
        w, b = w.detach().clone(), b.detach().clone()
        w[2 * H : 3 * H] *= 2  # the g gate: tanh(z) = 2σ(2z) − 1
        b[2 * H : 3 * H] *= 2
        if layer == 0 and table_fits:
            emb_gates = torch.addmm(b, decoder.embedding.weight.detach(), w[:, :E].t())  # (V, 4H)
            w = w[:, E:]
        layers.append((packed.pack(w, 320, decoder.bf16_search, few_rows=True), b))
    W_c = (packed.pack(2 * decoder.W_c.weight.detach(), 320, decoder.bf16_search, few_rows=True)
           if decoder.W_c is not None else None)
    if decoder.int8_output:
        W_s = packed.pack_int8(decoder.W_s.weight, 320)
    else:
        W_s = packed.pack(decoder.W_s.weight, 320, decoder.bf16_search, few_rows=True)
    return layers, emb_gates, W_c, W_s


def fusable(decoder: nn.Module, memory: Memory | None, need_weights: bool) -> bool:
    """Teacher forcing with autograd on CPU, outside autocast, with an attention whose score is
    a dot product with keys plus a bias (global dot/general/location): kernels/fused_rnn.py
    applies."""
    return (
        torch.is_grad_enabled()
        and not need_weights
        and memory is not None
        and memory.keys.device.type == "cpu"
        and not torch.is_autocast_enabled("cpu")
        and choose("decoder loop", decoder)[0] is KERNELS[0]
    )


def loop_weights(
    decoder: nn.Module, emb: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """For the CPU training loops (fused_rnn): layer 1's embedding half of the gates plus its
    bias, W_ih[:, :E] emb + b_ih + b_hh for all steps; per layer W = [W_ih | W_hh] (layer 1
    without its embedding columns); b_ih + b_hh of layers 2..L."""
    rnn, E = decoder.rnn, decoder.embed_dim
    emb_gates = product(emb, rnn.weight_ih_l0[:, :E], rnn.bias_ih_l0 + rnn.bias_hh_l0)
    weights = [torch.cat([rnn.weight_ih_l0[:, E:], rnn.weight_hh_l0], dim=1)]
    biases = []
    for layer in range(1, decoder.layers):
        w_ih, w_hh = getattr(rnn, f"weight_ih_l{layer}"), getattr(rnn, f"weight_hh_l{layer}")
        weights.append(torch.cat([w_ih, w_hh], dim=1))
        biases.append(getattr(rnn, f"bias_ih_l{layer}") + getattr(rnn, f"bias_hh_l{layer}"))
    return emb_gates, weights, biases


def fused_features(
    decoder: nn.Module, tgt_in: torch.Tensor, state: dict[str, torch.Tensor], memory: Memory
) -> tuple[torch.Tensor, dict[str, torch.Tensor], None]:
    """``LuongDecoder.features`` through fused_rnn.input_feeding_loop: the same function and gradients."""
    # (T, B, E): time-major
    emb = dropout(decoder.embedding(tgt_in.t()), decoder.dropout.p, decoder.training)
    emb_gates, weights, biases = loop_weights(decoder, emb)
    p = decoder.dropout.p if decoder.training else 0.0
    keys, score_bias = decoder.attention.dot_scores(memory)
    features, h_n, c_n = input_feeding_loop(
        emb_gates, state["h"], state["c"], state["feed"], keys, memory.values,
        score_bias, decoder.W_c.weight, weights, biases, p,
    )
    return features, {"h": h_n, "c": c_n, "feed": features[:, -1]}, None


def stepped_features(
    decoder: nn.Module, tgt_in: torch.Tensor, state: dict[str, torch.Tensor], memory: Memory,
    start: int, need_weights: bool,
) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor | None]:
    """``LuongDecoder.features`` for any attention with the LSTM stack and W_c of fused_rnn.StepLoop (the
    weight gradients formed once for all steps): the same function and gradients."""
    T = tgt_in.size(1)
    emb = decoder.dropout(decoder.embedding(tgt_in))  # (B, T, E)
    emb_gates, weights, biases = loop_weights(decoder, emb)
    p = decoder.dropout.p if decoder.training else 0.0
    loop = StepLoop(weights, biases, decoder.W_c.weight, p, tgt_in.size(0))
    positions = torch.arange(start, start + T, device=tgt_in.device)
    attend = attention_steps.steps_for(decoder.attention, memory) or (
        lambda query, positions, need_weights: decoder.attention(query, memory, positions,
                                                                 need_weights))
    h, c, feed = list(state["h"].unbind(1)), list(state["c"].unbind(1)), state["feed"]
    outputs, all_weights = [], []
    for t, emb_gates_t in enumerate(emb_gates.unbind(1)):  # unbind: see LuongDecoder.features
        h, c = loop.lstm(emb_gates_t, feed, h, c)
        context, w_t = attend(h[-1].unsqueeze(1), positions[t : t + 1], need_weights)
        feed = decoder.dropout(loop.attentional(context.squeeze(1), h[-1]))  # h̃_t, fed to t+1
        outputs.append(feed)
        if need_weights and w_t is not None:
            all_weights.append(w_t)
    weights_out = torch.cat(all_weights, dim=1) if all_weights else None
    new_state = {"h": torch.stack(h, 1), "c": torch.stack(c, 1), "feed": feed}
    return torch.stack(outputs, dim=1), new_state, weights_out


def steppable(decoder: nn.Module, memory: Memory | None) -> bool:
    """Teacher forcing with autograd on CPU, outside autocast, with an attention: StepLoop."""
    return (
        torch.is_grad_enabled()
        and memory is not None
        and decoder.attention is not None
        and memory.values.device.type == "cpu"
        and not torch.is_autocast_enabled("cpu")
    )



def _fused_supports(decoder: nn.Module) -> tuple[bool, str]:
    att = decoder.attention
    if not decoder.input_feed:
        return False, "no input feeding: nn.LSTM runs all steps at once"
    if att is None:
        return False, "no attention"
    name = type(att).__name__
    if not is_definition(att, "attnmt.attention.global_attention.GlobalAttention"):
        return False, f"attention {name}: the fused loop takes global attention only"
    if not att.score.dot_bias:
        return False, f"score {att.score.name}: not a dot product with keys plus a bias"
    return True, ""


def _stepped_supports(decoder: nn.Module) -> tuple[bool, str]:
    if not decoder.input_feed:
        return False, "no input feeding: nn.LSTM runs all steps at once"
    return (decoder.attention is not None), "no attention"


KERNELS = (
    Kernel("fused_rnn.input_feeding_loop", "decoder loop", DECODER,
           "input feeding, global attention with a dot, general or location score",
           _fused_supports, ("cpu",), fused_features),
    Kernel("fused_rnn.StepLoop", "decoder loop", DECODER, "input feeding, any attention",
           _stepped_supports, ("cpu",), stepped_features),
    Kernel("lstm_steps.infer_step", "search step", DECODER, "every LuongDecoder",
           lambda decoder: (True, ""), ("cpu", "cuda"), infer_step),
)
