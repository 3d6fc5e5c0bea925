"""LSTM language model (``task: lm``, ``model.type: lstm``) and ancestral sampling for any LM.

    x_k = Dropout(E[y_{k-1}]),   h_k = LSTM(x_k, h_{k-1}),   P(y_k | y_<k) = softmax(φ(h_k))
    φ(h) = W Dropout(h) + b      (eq. 5 of Li et al. 2022; W tied to E when embed == hidden and
                                  model.tie_output, else a separate matrix)

It implements the generation interface of seq2seq.py with an empty source: ``src`` (B, 0) is
ignored and ``encode`` only carries the batch size, so greedy/beam search, sampling and the NgramRes
wrapper (attnmt/ngram/residual.py) work on it unchanged.
"""

from __future__ import annotations

import torch
from torch import nn

from attnmt.config import ModelConfig
from attnmt.data.vocab import BOS, EOS, PAD
from attnmt.models.common import init_uniform_


class LSTMLM(nn.Module):
    has_attention = False

    def __init__(self, cfg: ModelConfig, vocab: int, init_uniform: float = 0.0):
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(vocab, cfg.embed, padding_idx=PAD)
        self.rnn = nn.LSTM(cfg.embed, cfg.hidden, cfg.layers, batch_first=True,
                           dropout=cfg.dropout if cfg.layers > 1 else 0.0)
        self.dropout = nn.Dropout(cfg.dropout)
        self.output = nn.Linear(cfg.hidden, vocab)  # φ
        if init_uniform > 0:
            init_uniform_(self, init_uniform)
        if getattr(cfg, "tie_output", True) and cfg.embed == cfg.hidden:
            self.output.weight = self.embedding.weight

    def _run(self, ids: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None):
        x = self.dropout(self.embedding(ids))  # (B, T, E)
        h, state = self.rnn(x, state)  # (B, T, H)
        return self.output(self.dropout(h)), state  # (B, T, V)

    def forward(self, src, src_lengths, tgt_in, need_weights: bool = False):
        # Causal: padding after a sentence's end cannot change its earlier positions.
        logits, _ = self._run(tgt_in, None)
        return logits, None

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> dict:
        return {"lengths": src_lengths}  # nothing to encode; keeps the batch size for the search

    def init_state(self, enc: dict) -> dict[str, torch.Tensor]:
        B = enc["lengths"].size(0)
        w = self.embedding.weight
        zeros = w.new_zeros(B, self.cfg.layers, self.cfg.hidden)  # batch first, for select_batch
        return {"h": zeros, "c": zeros.clone()}

    def step(self, prefix, state, enc, need_weights: bool = False):
        hc = (state["h"].transpose(0, 1).contiguous(), state["c"].transpose(0, 1).contiguous())
        logits, (h, c) = self._run(prefix[:, -1:], hc)
        return logits[:, 0], {"h": h.transpose(0, 1), "c": c.transpose(0, 1)}, None


@torch.no_grad()
def sample(
    model,
    n: int,
    max_len: int = 100,
    temperature: float = 1.0,
    top_k: int = 0,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> list[list[int]]:
    """Ancestral sampling of ``n`` sentences (ids without <s>/</s>) from an LM or any model with
    the step interface and an empty source, e.g. an NgramRes-wrapped LM (its step already adds
    α·log P_ng). temperature τ: softmax(scores / τ); top_k > 0 keeps the k best ids."""
    src = torch.zeros((n, 0), dtype=torch.long, device=device)
    lengths = torch.zeros(n, dtype=torch.long, device=device)
    enc = model.encode(src, lengths)
    state = model.init_state(enc)
    prefix = torch.full((n, 1), BOS, dtype=torch.long, device=device)
    done = torch.zeros(n, dtype=torch.bool, device=device)
    for _ in range(max_len):
        scores, state, _ = model.step(prefix, state, enc, False)
        logp = torch.log_softmax(scores.float(), dim=-1)
        logp[:, PAD] = float("-inf")
        logp[:, BOS] = float("-inf")
        logp = logp / max(temperature, 1e-6)
        if top_k > 0:
            kth = logp.topk(min(top_k, logp.size(-1)), dim=-1).values[:, -1:]
            logp = logp.masked_fill(logp < kth, float("-inf"))
        probs = torch.softmax(logp, dim=-1)
        nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
        prefix = torch.cat([prefix, nxt.unsqueeze(1)], dim=1)
        done |= nxt == EOS
        if bool(done.all()):
            break
    out = []
    for row in prefix[:, 1:].tolist():
        toks = []
        for t in row:
            if t in (EOS, PAD):
                break
            toks.append(t)
        out.append(toks)
    return out
