"""Encoder-only Transformer sentence classifier (task: classify) with the same attention choices.

    h = Encoder(√d · E[x] + PE)                 (the Transformer encoder stack, enc_self_attention)
    p(c | x) = softmax(W_o · mean_{j real} h_j)    (mean over non-padding positions)

It plugs into the generic trainer: ``forward(src, src_lengths, tgt_in)`` returns logits (B, 1, C)
(one "target step"), and the class defines the objective the trainer asks every model for
(``loss``, ``units``: sentences) and its validation (``evaluate``: loss and accuracy) in place of
the token loss and perplexity. Labels are stored as the single target token of a batch
(``batch.tgt_out[:, 0]``, ids 0..C−1, see attnmt/data/labels.py). Accuracy of a run on a file,
by group: attnmt/eval/classify.py.
"""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn

from attnmt.config import ModelConfig
from attnmt.data.batching import iterate_batches, make_batches
from attnmt.models.common import lengths_to_mask
from attnmt.models.transformer import Embedder, Stack


class TransformerClassifier(nn.Module):
    has_attention = False

    def __init__(self, cfg: ModelConfig, vocab: int, classes: int):
        super().__init__()
        self.cfg = cfg
        self.embed = Embedder(vocab, cfg)
        self.encoder = Stack(cfg, "enc_self_attention", cross=False)
        self.output = nn.Linear(cfg.hidden, classes)

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor, internals: list | None = None):
        mask = lengths_to_mask(src_lengths, src.size(1))
        h, _, _ = self.encoder(self.embed(src), mask, internals=internals)
        return h, mask

    def forward(self, src, src_lengths, tgt_in=None, need_weights: bool = False):
        h, mask = self.encode(src, src_lengths)
        m = mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp_min(1.0)  # (B, D)
        return self.output(pooled).unsqueeze(1), None  # (B, 1, C)

    # -- the training objective (attnmt/models/common.py): one label per sentence ---------------
    def loss(self, logits: torch.Tensor, batch, smoothing: float = 0.0) -> torch.Tensor:
        """Summed cross-entropy over the batch's sentences. logits (B, 1, C)."""
        return F.cross_entropy(logits[:, 0].float(), labels_of(batch), reduction="sum", label_smoothing=smoothing)

    def units(self, batch) -> int:
        return batch.src.size(0)

    @torch.no_grad()
    def evaluate(self, src, tgt, device, batch_tokens: int = 4000, autocast=nullcontext) -> dict:
        """Dev loss per sentence, accuracy and (for the trainer's best-checkpoint rule) ppl = exp(loss)."""
        was_training = self.training
        self.eval()
        total, correct, n = 0.0, 0, 0
        for batch in iterate_batches(src, tgt, make_batches(src, tgt, batch_tokens, "tokens", shuffle=False)):
            batch = batch.to(device)
            with autocast():
                logits, _ = self(batch.src, batch.src_lengths, batch.tgt_in)
            total += float(self.loss(logits, batch))
            correct += int((logits[:, 0].argmax(-1) == labels_of(batch)).sum())
            n += batch.src.size(0)
        self.train(was_training)
        loss = total / max(n, 1)
        return {"loss": loss, "ppl": math.exp(min(loss, 50)), "accuracy": correct / max(n, 1), "sentences": n}


def labels_of(batch) -> torch.Tensor:
    """Class ids: a label is stored as the one target token of its sentence (tgt_out[:, 0])."""
    return batch.tgt_out[:, 0]
