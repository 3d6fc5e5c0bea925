"""The window variant's cross-attention at a step of a bfloat16 search on the CPU: what
``SharedKeys.attend`` computes for a window cross-attention (``MultiHeadAttention.forward`` with
the ``Window`` unit of attention/window.py, one query per row, a sentence's beam rows as one block
of queries against its keys), bit for bit, for ``transformer_search.step``:

    Q, Q_P, Q_L = [W_q; W^q_P; W_q^L] LN(x)      one product of W_q and the window's query maps
                                                 (input pointers, additive), bfloat16, handed on
    S = Q Kᵀ/√d                                  scores (the window's attention pointers: with
                                                 their pointer scores, ``with_scores``)
    φ̂ = softmax(pointer scores + mask bias)      (B, H, 2, T, S), ``InputPointers.scores`` or
                                                 ``BoundaryPointers.with_scores``
    M = Window.soft_mask(φ̂)                      the definition's mask
    A = softmax(S + (Q_L K_Lᵀ/√d) ⊙ M + bias)    additive; multiplicative: softmax(S + bias) ⊙ M
    out = W_o (A V)                              bfloat16 into W_o

The math is the definition's own calls or the same operations in the same order; what this step
does not do at every step is what the definition's general call pays for: the float32 copies of
each bfloat16 product's result and their roundings back for the next product, the 0/−inf key
bias made twice from the boolean mask (``SharedKeys.bias`` is made once per batch), the merge of
the heads in float32, the module calls and branches of a general forward. ``plan`` stacks the query maps and finds the
packed weights once per search (``transformer_search.plan``); the keys are the memory's laid-out
bfloat16 keys (``SharedKeys.laid_out``, made once per batch, carried through sentence drops).

The ``full`` ablation (no pointers), weights asked for, float32 or int8 maps: the definition.
``transformer_search.plan`` takes this step through ``dispatch.choose`` ("search cross-attention",
for the module's variant): any variant's step of that part is taken alike.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from attnmt.kernels import packed
from attnmt.kernels.dispatch import Kernel
from attnmt.kernels.kv_cache import SharedKeys

IMPLEMENTS = ("attnmt.attention.window.Window",)


def supports(unit) -> tuple[bool, str]:
    """Whether ``context`` computes the step of a cross-attention computing this window variant."""
    if unit.options.mask not in ("exact", "union", "sum"):
        return False, f"window mask {unit.options.mask!r} (an ablation without pointers)"
    return True, ""


def plan(attn: nn.Module) -> Callable[[SharedKeys, torch.Tensor], torch.Tensor] | None:
    """The step of cross-attention module ``attn`` (its variant a window that ``supports``
    accepts): ``step(memory, h)``, ``context`` with the module's query maps stacked [W_q; the
    window's query maps] and W_o packed in bfloat16 (None where they are not: the definition's call)."""
    query_maps = attn.unit.maps(attn)[0]
    maps = (attn.q, *query_maps.values())
    if not all(type(m) is packed.PackedLinear and m.bf16_search and not m.int8_search for m in (*maps, attn.o)):
        return None
    queries, o = packed.stacked(maps), (attn.o._packed(), attn.o.bias)
    if any(w.packed is None or w.packed.dtype != torch.bfloat16 for w, _ in (queries, o)):
        return None
    cross = {"attn": attn, "queries": queries, "names": ("q", *query_maps),
             "sizes": [m.out_features for m in maps], "o": o}
    return lambda memory, h: context(cross, memory, h)


def context(cross: dict, memory: SharedKeys, h: torch.Tensor) -> torch.Tensor:
    """W_o of the window attention's context for h (E·rows, 1, D) float32, the normed decoder
    states of ``memory``'s E sentences × rows hypotheses: (E·rows, 1, D) bfloat16."""
    attn = cross["attn"]
    unit, options = attn.unit, attn.unit.options
    E, rows, H, d = h.size(0) // memory.rows, memory.rows, attn.heads, attn.head_dim
    keys = memory.laid_out(unit, True)  # bfloat16, as the definition's products read them
    bias = memory.bias(torch.float32)  # (E, 1, 1, S): 0 on real keys, −inf on padding
    made = packed.linear_low(h, *cross["queries"]).view(E, rows, -1).split(cross["sizes"], -1)
    made = dict(zip(cross["names"], made))
    q = made["q"].view(E, rows, H, d).transpose(1, 2)  # (E, H, rows, d_h): a sentence's rows as queries
    with packed.bf16_products(True):
        if options.pointers == "input":
            scores = packed.matmul(q, keys["k"].transpose(-1, -2)) * attn.scale
            pointer_scores = attn.pointers.scores(attn.pointers.split(made["pq"]), keys["pk"])
        else:
            scores, pointer_scores = attn.pointers.with_scores(q, keys["k"])
            scores = scores * attn.scale
        mask = unit.soft_mask(torch.softmax(pointer_scores + bias.unsqueeze(2), dim=-1))
        if options.combine == "mul":
            weights = torch.softmax(scores + bias, dim=-1) * mask
            if options.renorm:
                weights = weights / weights.sum(-1, keepdim=True).clamp_min(1e-9)
        else:
            local = packed.matmul(attn._split(made["lq"]), keys["lk"].transpose(-1, -2)) * attn.scale
            weights = torch.softmax(torch.addcmul(scores, local, mask) + bias, dim=-1)
    out = torch.matmul(weights.to(torch.bfloat16), keys["v"])  # (E, H, rows, d_h) bfloat16
    return packed.linear_low(out.transpose(1, 2).reshape(E * rows, 1, H * d), *cross["o"])


KERNELS = (Kernel("window_search.context", "search cross-attention", IMPLEMENTS[0],
                  "a window's cross-attention in a bfloat16 search on the CPU, inside transformer_search.step "
                  "(elsewhere, and for the full ablation, the definition over the shared keys)",
                  supports, ("cpu",), plan),)
