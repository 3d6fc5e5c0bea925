"""Transformer (Vaswani et al. 2017) encoder–decoder and decoder-only LM, with selectable attention.

Layer (pre-norm, the default; ``model.norm: post`` gives the original post-norm):

    pre:   x = x + Dropout(Sublayer(LN(x)))     ...  and a final LN after the stack
    post:  x = LN(x + Dropout(Sublayer(x)))

Sub-layers: self-attention, cross-attention (decoder of the encoder–decoder), and the position-wise
feed-forward W_2 ReLU(W_1 x). Inputs: √d · embedding + positions (sinusoidal, learned, or none:
relative self-attention's distances as the only order information).

Each attention kind (encoder self, decoder self, cross) picks its variant from ModelConfig
(``enc_self_attention``, ``dec_self_attention``, ``cross_attention``; checked by config.validate); ``attention_layers: N``
applies the variants to the lowest N layers of each stack only (0 = every layer); the layers
above use standard attention. See attnmt/attention/multihead.py for the variants.

Both models implement the generation interface of seq2seq.py. Incremental decoding caches every
layer's self-attention keys/values (and window pointer / local keys) in the state, so a step costs
O(t) rather than re-running the prefix; cross-attention keys are computed once in ``encode``.
``forward``'s weights are the last decoder layer's cross-attention averaged over heads (B, T, S).
The LM's logits come from ``self.output`` (a linear map, tied to the input embedding by
default), the hook other heads (e.g. NgramRes) can reuse. Every linear map of attention,
feed-forward and output is a ``packed.PackedLinear``: an nn.Linear whose training products take
bfloat16 operands under ``train.amp`` on a CPU with bfloat16 units, and which takes packed
weights when there is no autograd (search, validation; in bfloat16 with ``translate --bf16``).
Dropout (embeddings, sub-layer outputs with the residual add, the feed-forward's ReLU) goes
through ``kernels/dropout.py``: F.dropout with cheaper masks on the CPU. ``token_loss`` (the
trainer's loss) applies the output layer to non-padding positions only, through
``kernels/fused_loss.py`` on the CPU.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnmt.attention.multihead import MultiHeadAttention, unit_of
from attnmt.config import ModelConfig
from attnmt.data.vocab import PAD
from attnmt.errors import UserError
from attnmt.kernels import dropout as dropout_kernel
from attnmt.kernels import transformer_search
from attnmt.kernels.cache import growing
from attnmt.kernels.dispatch import choose
from attnmt.kernels.fused_loss import linear_cross_entropy
from attnmt.kernels.kv_cache import (
    KVBuffer,
    SharedKeys,
    SharedMemory,
    bf16_search_on,
    buffers,
    one_query_step,
)
from attnmt.kernels.packed import PackedLinear, bf16_products, relu_chain
from attnmt.models.common import lengths_to_mask, rows_loss


def sinusoidal(n: int, d: int, device: torch.device | None = None) -> torch.Tensor:
    """PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(...): (n, d)."""
    pos = torch.arange(n, dtype=torch.float32, device=device).unsqueeze(1)
    freq = torch.exp(torch.arange(0, d, 2, dtype=torch.float32, device=device) * (-math.log(10000.0) / d))
    pe = torch.zeros(n, d, device=device)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq[: d // 2])
    return pe


class Embedder(nn.Module):
    """√d · E[y] + PE[position]; learned positions beyond the table reuse its last row;
    ``positions: none`` adds nothing (a relative-position model's form, which CTranslate2 runs)."""

    def __init__(self, vocab: int, cfg: ModelConfig, embedding: nn.Embedding | None = None):
        super().__init__()
        d = cfg.hidden
        self.embed = embedding or nn.Embedding(vocab, d, padding_idx=PAD)
        if embedding is None:
            nn.init.normal_(self.embed.weight, std=d**-0.5)
            with torch.no_grad():
                self.embed.weight[PAD].zero_()
        self.scale = math.sqrt(d)
        self.learned = nn.Embedding(cfg.max_positions, d) if cfg.positions == "learned" else None
        self.absolute = cfg.positions != "none"
        if self.learned is not None:
            nn.init.normal_(self.learned.weight, std=d**-0.5)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """ids (B, T) at positions offset..offset+T-1 -> (B, T, D)"""
        T = ids.size(1)
        x = self.embed(ids) * self.scale
        if self.learned is not None:
            pos = (torch.arange(T, device=ids.device) + offset).clamp(max=self.learned.num_embeddings - 1)
            x = x + self.learned(pos)
        elif self.absolute:
            x = x + self._sinusoid(offset + T, x.size(-1), ids.device)[offset : offset + T].to(x.dtype)
        return dropout_kernel.dropout(x, self.dropout.p, self.training)

    def _sinusoid(self, n: int, d: int, device: torch.device) -> torch.Tensor:
        """``sinusoidal(n', d)`` for some n' ≥ n, kept from call to call (a search step reads one
        row; building the table anew every step cost O(t) work and eight tensor ops)."""
        def build(kept: torch.Tensor | None) -> torch.Tensor:
            return sinusoidal(max(n, 256, 2 * len(kept) if kept is not None else 0), d, device)

        return growing(self, "sinusoid", (), build, lambda kept: len(kept) >= n and kept.device == device, (d,))


class FeedForward(nn.Module):
    def __init__(self, d: int, ff: int, dropout: float):
        super().__init__()
        self.w1, self.w2 = PackedLinear(d, ff), PackedLinear(ff, d)
        self.dropout = dropout
        for lin in (self.w1, self.w2):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:  # a search's bfloat16 products: kernels/packed.py, the same numbers
            fast = relu_chain(x, self.w1, self.w2)
            if fast is not None:
                return fast
        return self.w2(dropout_kernel.relu_dropout(self.w1(x), self.dropout, self.training))


def _attention(cfg: ModelConfig, variant: str, role: str) -> MultiHeadAttention:
    """The attention ``role`` ("encoder self-attention", "decoder self-attention",
    "cross-attention": what it computes in a run, kernels/dispatch.ROLES) with ``variant`` and
    the options the variant reads from ``cfg``."""
    attn = MultiHeadAttention(cfg.hidden, cfg.heads, cfg.dropout, variant,
                              unit_of(variant).options_from(cfg, variant), PackedLinear)
    attn.role = role
    return attn


class Layer(nn.Module):
    """One encoder layer (self-attention, FF) or decoder layer (causal self, cross, FF)."""

    def __init__(self, cfg: ModelConfig, self_variant: str, cross_variant: str | None = None,
                 self_role: str = "encoder self-attention"):
        super().__init__()
        d = cfg.hidden
        self.pre = cfg.norm == "pre"
        self.self_attn = _attention(cfg, self_variant, self_role)
        self.self_norm = nn.LayerNorm(d)
        self.cross_attn = _attention(cfg, cross_variant, "cross-attention") if cross_variant else None
        self.cross_norm = nn.LayerNorm(d) if cross_variant else None
        self.ff = FeedForward(d, cfg.ff, cfg.dropout)
        self.ff_norm = nn.LayerNorm(d)
        self.dropout = nn.Dropout(cfg.dropout)

    def _sub(self, x: torch.Tensor, norm: nn.LayerNorm, fn) -> tuple[torch.Tensor, object]:
        out, extra = fn(norm(x) if self.pre else x)
        x = dropout_kernel.dropout_add(x, out, self.dropout.p, self.training)
        return (x if self.pre else norm(x)), extra

    def self_attention(self, h: torch.Tensor, mask: torch.Tensor | None, causal: bool, cache: dict | KVBuffer | None,
                       offset: int, internals: dict | None) -> tuple[torch.Tensor, object]:
        """Self-attention of the (normed) layer input h over the cached keys and its own: (output,
        the keys of every position so far: the next state)."""
        queries, keys, given = self.self_attn.project_self(h)  # Q, K, V (and more) in one product
        if isinstance(cache, KVBuffer):  # the same keys, written into preallocated buffers
            kernel = (choose("search self-attention", self.self_attn, h.device.type)[0]
                      if one_query_step(self.self_attn, h, mask, internals) else None)
            low = bf16_search_on(self.self_attn, h) and h.size(1) == 1 and not torch.is_grad_enabled()
            keys, state = cache.extend(keys, one_query=kernel is not None, low=low)
            if keys is None:  # buffered for, and attended by, the one-query kernel
                return kernel.run(self.self_attn, queries, state), state
            if state.layout == "low" and low:  # a variant's keys, bfloat16 over the capacity
                if causal and mask is None and internals is None:  # past t causally masked; bf16 products
                    with bf16_products():
                        return self.self_attn(h, keys, None, True, offset, False, internals, queries, given)[0], state
                keys = state.keys()
        else:
            if cache:
                keys = {k: torch.cat([cache[k], v], dim=2) for k, v in keys.items()}
            state = keys
        return self.self_attn(h, keys, mask, causal, offset, False, internals, queries, given)[0], state

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        causal: bool = False,
        cache: dict | None = None,
        offset: int = 0,
        memory: dict | None = None,
        memory_mask: torch.Tensor | None = None,
        need_weights: bool = False,
        internals: dict | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, dict]:
        """x (B, T, D); mask (B, T) key mask for self-attention (None: all real); cache: this
        layer's self-attention keys of earlier positions (incremental decoding); memory: the
        cross-attention keys of the encoder output. Returns x, cross weights (B, H, T, S) and the
        updated self-attention keys (a ``kv_cache.KVBuffer`` cache: the next such state, holding
        the same keys as the concatenation)."""
        state: list = [None]
        self_int = {} if internals is not None else None

        def self_attention(h):
            out, state[0] = self.self_attention(h, mask, causal, cache, offset, self_int)
            return out, None

        x, _ = self._sub(x, self.self_norm, self_attention)
        weights = None
        if self.cross_attn is not None:
            cross_int = {} if internals is not None else None

            def cross_attention(h):
                # the queries at their target positions (a variant's bias may read them, ALiBi's)
                if isinstance(memory, SharedKeys):  # the same attention, keys not copied per row
                    return memory.attend(self.cross_attn, h, need_weights, cross_int, offset)
                return self.cross_attn(h, memory, memory_mask, False, offset, need_weights, cross_int)

            x, weights = self._sub(x, self.cross_norm, cross_attention)
            if internals is not None:
                internals["cross"] = cross_int
        x, _ = self._sub(x, self.ff_norm, lambda h: (self.ff(h), None))
        if internals is not None:
            internals["self"] = self_int
        return x, weights, state[0]


class Stack(nn.Module):
    """N layers; the lowest ``attention_layers`` (0 = all) use the configured variants."""

    def __init__(self, cfg: ModelConfig, self_kind: str, cross: bool):
        super().__init__()
        n_var = cfg.attention_layers or cfg.layers
        role = "decoder self-attention" if self_kind == "dec_self_attention" else "encoder self-attention"
        self.layers = nn.ModuleList(
            Layer(
                cfg,
                getattr(cfg, self_kind) if i < n_var else "standard",
                (cfg.cross_attention if i < n_var else "standard") if cross else None,
                role,
            )
            for i in range(cfg.layers)
        )
        self.final_norm = nn.LayerNorm(cfg.hidden) if cfg.norm == "pre" else nn.Identity()

    def forward(self, x, mask=None, causal=False, caches=None, offset=0, memory=None,
                memory_mask=None, need_weights=False, internals=None):
        """Returns output (B, T, D), the last layer's cross weights averaged over heads (B, T, S)
        or None, and every layer's self-attention keys (the next decoding state)."""
        new_caches, weights = [], None
        for i, layer in enumerate(self.layers):
            last = i == len(self.layers) - 1
            layer_int = {} if internals is not None else None
            x, w, keys = layer(
                x, mask, causal, caches[i] if caches else None, offset,
                memory[i] if memory is not None else None, memory_mask, need_weights and last, layer_int,
            )
            new_caches.append(keys)
            if internals is not None:
                internals.append(layer_int)
            if w is not None:
                weights = w.mean(dim=1)
        return self.final_norm(x), weights, new_caches


def _empty_state(model: nn.Module, layers: int) -> list:
    """A search's first decoder state: the keys buffered (kernels/kv_cache.py) when no gradient
    is asked for, else the definition's dicts of concatenated keys."""
    return buffers(layers) if model.kv_buffers and not torch.is_grad_enabled() else []


def _output_loss(output: nn.Linear, h: torch.Tensor, tgt_out: torch.Tensor, smoothing: float) -> torch.Tensor:
    """``models.common.token_loss(output(h), tgt_out, smoothing)`` with the output layer applied
    to the non-padding positions only, and on the CPU with autograd through
    ``fused_loss.linear_cross_entropy`` (the output layer and the loss in one node, as the LSTM's
    ``Seq2Seq.token_loss``)."""
    keep = tgt_out != PAD  # (B, T)
    h, target = h[keep], tgt_out[keep]
    if torch.is_grad_enabled() and h.device.type == "cpu" and not torch.is_autocast_enabled("cpu"):
        return linear_cross_entropy(h, output.weight, output.bias, target, smoothing)
    return rows_loss(output, h, target, smoothing)


def set_variants(model: nn.Module, enabled: bool) -> None:
    """Switch every non-standard attention of ``model`` on or off (off = plain Transformer)."""
    for m in model.modules():
        if isinstance(m, MultiHeadAttention) and m.variant != "standard":
            m.use_variant = enabled


class Transformer(nn.Module):
    """Encoder–decoder Transformer for translation."""

    has_attention = True

    def __init__(self, cfg: ModelConfig, src_vocab: int, tgt_vocab: int):
        super().__init__()
        if cfg.share_embeddings and src_vocab != tgt_vocab:
            raise UserError(f"model.share_embeddings needs equal vocabularies, got {src_vocab} and {tgt_vocab}")
        self.cfg = cfg
        self.src_embed = Embedder(src_vocab, cfg)
        shared = self.src_embed.embed if cfg.share_embeddings else None
        self.tgt_embed = Embedder(tgt_vocab, cfg, shared)
        self.encoder = Stack(cfg, "enc_self_attention", cross=False)
        self.decoder = Stack(cfg, "dec_self_attention", cross=True)
        self.output = PackedLinear(cfg.hidden, tgt_vocab, bias=False)
        if cfg.tie_output:
            self.output.weight = self.tgt_embed.embed.weight
        else:
            nn.init.normal_(self.output.weight, std=cfg.hidden**-0.5)

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor, internals: list | None = None) -> dict:
        mask = lengths_to_mask(src_lengths, src.size(1))  # (B, S)
        out, _, _ = self.encoder(self.src_embed(src), mask, internals=internals)
        cross = [layer.cross_attn.project_keys(out) for layer in self.decoder.layers]
        if self.kv_buffers and self.share_memory and not torch.is_grad_enabled():  # beam rows share it
            return SharedMemory(out, mask, cross)
        return {"out": out, "mask": mask, "cross": cross}

    # search states in kernels/kv_cache.py's buffers, the encoder output shared by beam rows
    # (False: the definition's dicts, concatenated and repeated)
    kv_buffers = True
    share_memory = True  # with kv_buffers: the encoder output as kv_cache.SharedMemory

    def init_state(self, enc: dict) -> dict:
        # filled by the first step; every tensor is (B, H, t, ·)
        return {"layers": _empty_state(self, len(self.decoder.layers))}

    def decode(self, tgt_in, enc, caches=None, offset=0, need_weights=False, internals=None):
        x = self.tgt_embed(tgt_in, offset)
        h, weights, caches = self.decoder(
            x, None, True, caches, offset, enc["cross"], enc["mask"], need_weights, internals
        )
        return self.output(h), weights, caches

    def forward(self, src, src_lengths, tgt_in, need_weights: bool = False):
        logits, weights, _ = self.decode(tgt_in, self.encode(src, src_lengths), need_weights=need_weights)
        return logits, weights

    def token_loss(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor,
                   tgt_out: torch.Tensor, smoothing: float = 0.0) -> torch.Tensor:
        """``models.common.token_loss(self(src, src_lengths, tgt_in)[0], tgt_out, smoothing)``
        without logits for padding positions (the trainer calls it when the class defines it)."""
        enc = self.encode(src, src_lengths)
        h, _, _ = self.decoder(self.tgt_embed(tgt_in), None, True, None, 0, enc["cross"], enc["mask"])
        return _output_loss(self.output, h, tgt_out, smoothing)

    # a search step through kernels/transformer_search.py where it applies (False: the definition's)
    search_kernel = True

    def step(self, prefix, state, enc, need_weights: bool = False):
        fast = transformer_search.plan_for(self, state, enc, need_weights) if self.search_kernel else None
        if fast is not None:  # the same logits, bfloat16 results handed on as they are
            return transformer_search.step(self, prefix, state, enc, fast)
        t = prefix.size(1) - 1  # position of the token fed now
        logits, weights, caches = self.decode(prefix[:, -1:], enc, state["layers"], t, need_weights)
        return logits[:, 0], {"layers": caches}, (weights[:, 0] if weights is not None else None)


class TransformerLM(nn.Module):
    """Decoder-only (GPT-style) Transformer LM: models tgt_in -> tgt_out, ignores src."""

    has_attention = False

    def __init__(self, cfg: ModelConfig, vocab: int):
        super().__init__()
        self.cfg = cfg
        self.embed = Embedder(vocab, cfg)
        self.decoder = Stack(cfg, "dec_self_attention", cross=False)
        self.output = PackedLinear(cfg.hidden, vocab, bias=False)  # logits = output(hidden states)
        if cfg.tie_output:
            self.output.weight = self.embed.embed.weight
        else:
            nn.init.normal_(self.output.weight, std=cfg.hidden**-0.5)

    def hidden(self, tgt_in, caches=None, offset=0, internals=None):
        """Final hidden states (B, T, D) and the new caches; logits are self.output(hidden)."""
        h, _, caches = self.decoder(self.embed(tgt_in, offset), None, True, caches, offset, internals=internals)
        return h, caches

    def forward(self, src, src_lengths, tgt_in, need_weights: bool = False):
        h, _ = self.hidden(tgt_in)
        return self.output(h), None

    def token_loss(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor,
                   tgt_out: torch.Tensor, smoothing: float = 0.0) -> torch.Tensor:
        """``models.common.token_loss(self(src, src_lengths, tgt_in)[0], tgt_out, smoothing)``
        without logits for padding positions."""
        h, _ = self.hidden(tgt_in)
        return _output_loss(self.output, h, tgt_out, smoothing)

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> dict:
        return {"lengths": src_lengths}  # nothing to encode; keeps the batch size for the search

    kv_buffers = True  # as Transformer.kv_buffers

    def init_state(self, enc: dict) -> dict:
        return {"layers": _empty_state(self, len(self.decoder.layers))}

    def step(self, prefix, state, enc, need_weights: bool = False):
        t = prefix.size(1) - 1
        h, caches = self.hidden(prefix[:, -1:], state["layers"], t)
        return self.output(h)[:, 0], {"layers": caches}, None
