"""A search step of the Transformer decoder in a bfloat16 search on the CPU: ``Transformer.step``
(models/transformer.py) for a pre-norm decoder, bit for bit the same logits, with less work
between its products. Each sublayer's path is ``dispatch.choose``'s for its attention module
(the variant it computes): standard attention's self- and cross-attention steps are this step's
own (``kv_cache.ONE_QUERY``, ``kv_cache.CROSS``, computed inline below); a variant's kernel of
part "search cross-attention" is its own step (the window's: kernels/window_search.py, bit for bit
too; its ``run(attn)`` makes ``step(memory, h)``); any other sublayer (relative, localness, a
window in self-attention) is the definition's own call (``Layer.self_attention``,
``SharedKeys.attend``) inside this step, so the variants keep the rest of the step's savings.

The definition's step, in a bfloat16 search, takes every product through ``PackedLinear`` and
``kv_cache``: each product's bfloat16 result comes back as float32 and the next product rounds it
to bfloat16 again. Those are exact round trips (a bfloat16 number is a float32 one), so this step
hands the bfloat16 results on as they are, and adds them to the float32 residual stream as
they are (float32 + bfloat16 is computed in float32: the same sum as after a conversion):

    Q, K, V = W_qkv LN(x)          bfloat16, written to the key buffers / attended as they are
    x += W_o SelfAttention(Q)      the context (bfloat16) straight into W_o
    x += W_o' CrossAttention(W_q' LN(x))   the queries and the context likewise
    x += W_2 ReLU(W_1 LN(x))       as packed.relu_chain (the definition's search), result bfloat16
    logits = W_out LN_final(x)

and it takes the per-layer work that depends on no row (finding each map's packed weight, the
definition's checks of variants, masks and layouts, module calls) once per search: ``plan``
builds it at the first step and the state carries it. Per layer and step that is ten
conversion passes (of R × D to R × 3D elements each) and ~60 Python-level calls fewer. The arithmetic is the
definition's: the same packed weights (``packed.stacked``, ``PackedLinear._packed``), the same
attention kernels (``kv_cache.low_context``, ``SharedKeys.low_context``), the same order of
additions. At a search's first step (one row per sentence: ``SharedKeys.attend`` takes the
definition there) cross-attention is the definition's own call.

Elsewhere (float32 or int8 maps, post-norm, attention weights asked for, the definition's dict
states or autograd) ``Transformer.step`` is the definition.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnmt.kernels import packed
from attnmt.kernels.dispatch import Kernel, choose
from attnmt.kernels.kv_cache import CROSS, ONE_QUERY, KVBuffer, SharedMemory, low_context

IMPLEMENTS = ("attnmt.models.transformer.Transformer",)


class Plan:
    """What a search step of each decoder layer reads that depends on no row: its norms, its
    standard sublayers' attention modules (None for a variant's), its maps' bfloat16 packed weights
    with their biases. Made at a search's first step (``plan``) and passed on in the state, which
    ``select_batch`` / ``repeat_rows`` leave as it is."""

    def __init__(self, layers: list[dict]):
        self.layers = layers


def supports(model: nn.Module) -> tuple[bool, str]:
    """Whether this step can take the model's search (its structure; the precision is the search's)."""
    if not model.decoder.layers[0].pre:
        return False, "post-norm layers"
    return True, ""


def _paths(layer: nn.Module):
    """A decoder layer's sublayer paths, ``dispatch.choose``'s: (its self-attention is this step's
    (ONE_QUERY), its cross-attention is (CROSS), the kernel of another cross-attention step or None)."""
    own_self = choose("search self-attention", layer.self_attn, "cpu")[0] is ONE_QUERY
    cross = choose("search cross-attention", layer.cross_attn, "cpu")[0]
    return own_self, cross is CROSS, (cross if cross is not CROSS else None)


def _maps(layer: nn.Module) -> list[nn.Module]:
    """The maps this step multiplies by itself: a standard sublayer's (a variant's run in its own)."""
    sa, ca = layer.self_attn, layer.cross_attn
    own_self, own_cross, _ = _paths(layer)
    return ([sa.q, sa.k, sa.v, sa.o] if own_self else []) + ([ca.q, ca.o] if own_cross else []) \
        + [layer.ff.w1, layer.ff.w2]


def plan_for(model: nn.Module, state: dict, enc, need_weights: bool) -> Plan | None:
    """The state's plan, or a new one where this step applies to the search; None where the
    definition's step must run."""
    kept = state.get("plan")
    if kept is not None:
        return kept
    if (need_weights or model.training or torch.is_grad_enabled() or not isinstance(enc, SharedMemory)
            or not state["layers"] or not all(isinstance(c, KVBuffer) for c in state["layers"])
            or enc.mask.device.type != "cpu"):
        return None

    def low(maps) -> bool:
        return all(type(m) is packed.PackedLinear and m.bf16_search and not m.int8_search
                   and m.weight.dtype == torch.float32 for m in maps)

    layers = model.decoder.layers
    if not low(layers[0].ff.children()):  # a float32 or int8 search (asked at its every step): at once
        return None
    if (choose("search step", model, "cpu")[0] is not KERNELS[0]
            or not all(low(_maps(layer)) for layer in layers)):
        return None
    return plan(model)


def plan(model: nn.Module) -> Plan | None:
    """Every decoder layer's packed maps (None where one is not packed in bfloat16: no oneDNN)."""
    layers = []
    for layer in model.decoder.layers:
        sa, ca, ff = layer.self_attn, layer.cross_attn, layer.ff
        own_self, own_cross, cross_kernel = _paths(layer)
        maps = {"w1": (ff.w1._packed(), ff.w1.bias), "w2": (ff.w2._packed(), ff.w2.bias)}
        if own_self:
            maps.update(qkv=packed.stacked((sa.q, sa.k, sa.v)), o=(sa.o._packed(), sa.o.bias))
        if own_cross:
            maps.update(cq=(ca.q._packed(), ca.q.bias), co=(ca.o._packed(), ca.o.bias))
        if any(w.packed is None or w.packed.dtype != torch.bfloat16 for w, _ in maps.values()):
            return None
        layers.append({**maps, "norms": (layer.self_norm, layer.cross_norm, layer.ff_norm), "layer": layer,
                       "self": sa if own_self else None, "cross": ca if own_cross else None,
                       "step": cross_kernel.run(ca) if cross_kernel is not None and cross_kernel.run else None})
    return Plan(layers)


def _norm(x: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


def step(model: nn.Module, prefix: torch.Tensor, state: dict, enc: SharedMemory, plan: Plan):
    """``Transformer.step(prefix, state, enc)`` (no weights): logits (rows, V), the next state."""
    t = prefix.size(1) - 1
    x = model.tgt_embed(prefix[:, -1:], t)  # (R, 1, D)
    R, _, D = x.shape
    caches = []
    for layer, cache, memory in zip(plan.layers, state["layers"], enc.cross):
        self_norm, cross_norm, ff_norm = layer["norms"]
        sa, ca = layer["self"], layer["cross"]
        if sa is None:  # a variant: the definition's self-attention (Layer.self_attention)
            out, cache = layer["layer"].self_attention(_norm(x, self_norm), None, True, cache, t, None)
            x = x + out
        else:
            H, d = sa.heads, sa.head_dim
            qkv = packed.linear_low(_norm(x, self_norm), *layer["qkv"])  # (R, 1, 3D) bfloat16
            q, k, v = qkv.view(R, 1, 3, H, d).permute(2, 0, 3, 1, 4)  # each (R, H, 1, d)
            _, cache = cache.extend({"k": k, "v": v}, one_query=True, low=True)
            context = low_context(q, cache, sa.scale).transpose(1, 2).reshape(R, 1, D)
            x = x + packed.linear_low(context, *layer["o"])  # float32 + bfloat16: float32, exactly
        caches.append(cache)
        h = _norm(x, cross_norm)
        if memory.rows == 1 or (ca is None and layer["step"] is None):
            # a search's first step, or a variant without a step of its own: the definition's call
            x = x + memory.attend(layer["layer"].cross_attn, h, False, None, t)[0]
        elif ca is None:  # a variant's own step (the window's: kernels/window_search.py)
            x = x + layer["step"](memory, h)
        else:
            H, d = ca.heads, ca.head_dim
            E = R // memory.rows
            queries = packed.linear_low(h, *layer["cq"]).view(E, memory.rows, H, d).transpose(1, 2)
            context = memory.low_context(queries, ca.scale).transpose(1, 2).reshape(R, 1, D)
            x = x + packed.linear_low(context, *layer["co"])
        hidden = packed.linear_low(_norm(x, ff_norm), *layer["w1"], "relu")  # as packed.relu_chain
        x = x + packed.linear_low(hidden, *layer["w2"])
    logits = model.output(model.decoder.final_norm(x))
    return logits[:, 0], {"layers": caches, "plan": plan}, None


KERNELS = (Kernel("transformer_search.step", "search step", "attnmt.models.transformer.Transformer",
                  "pre-norm, a bfloat16 search on the CPU; a variant's cross-attention through its own step "
                  "where one is declared (window_search.context), "
                  "another variant's sublayer the definition's (elsewhere the definition's step)",
                  supports, ("cpu",), step),)
