"""Encoder-only Transformer sentence classifier (task: classify) with the same attention choices.

    h = Encoder(√d · E[x] + PE)                 (the Transformer encoder stack, enc_self_attention)
    p(c | x) = softmax(W_o · mean_{j real} h_j)    (mean over non-padding positions)

It plugs into the generic trainer: ``forward(src, src_lengths, tgt_in)`` returns logits (B, 1, C)
(one "target step"), and the trainer's classify branch calls ``classification_loss`` and
``evaluate_classifier`` below instead of the token loss and perplexity. Labels are stored as the
single target token of a batch (``batch.tgt_out[:, 0]``, ids 0..C−1, see attnmt/data/labels.py).
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch import nn

from attnmt.config import ModelConfig
from attnmt.data.batching import iterate_batches, make_batches
from attnmt.models.common import lengths_to_mask
from attnmt.models.transformer import Embedder, Stack, check_config


class TransformerClassifier(nn.Module):
    has_attention = False

    def __init__(self, cfg: ModelConfig, vocab: int, classes: int):
        super().__init__()
        check_config(cfg, ("enc_self_attention",))
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


def labels_of(batch) -> torch.Tensor:
    return batch.tgt_out[:, 0]


def classification_loss(logits: torch.Tensor, batch, smoothing: float = 0.0) -> torch.Tensor:
    """Summed cross-entropy over the batch's sentences. logits (B, 1, C)."""
    return F.cross_entropy(logits[:, 0].float(), labels_of(batch), reduction="sum", label_smoothing=smoothing)


@torch.no_grad()
def predict(model, src: list[list[int]], device, batch_tokens: int = 4000) -> list[int]:
    """Predicted class ids of token-id sentences, in input order."""
    model.eval()
    out = [0] * len(src)
    dummy = [[0] for _ in src]
    for batch in iterate_batches(src, dummy, make_batches(src, dummy, batch_tokens, "tokens", shuffle=False)):
        batch = batch.to(device)
        logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
        for i, c in zip(batch.index.tolist(), logits[:, 0].argmax(-1).tolist()):
            out[i] = c
    return out


@torch.no_grad()
def evaluate_classifier(model, src, tgt, device, batch_tokens: int = 4000, autocast=None) -> dict:
    """Mean loss, accuracy and (for the trainer's best-checkpoint rule) ppl = exp(loss)."""
    was_training = model.training
    model.eval()
    total, correct, n = 0.0, 0, 0
    for batch in iterate_batches(src, tgt, make_batches(src, tgt, batch_tokens, "tokens", shuffle=False)):
        batch = batch.to(device)
        logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
        total += float(classification_loss(logits, batch))
        correct += int((logits[:, 0].argmax(-1) == labels_of(batch)).sum())
        n += batch.src.size(0)
    model.train(was_training)
    loss = total / max(n, 1)
    return {"loss": loss, "ppl": math.exp(min(loss, 50)), "accuracy": correct / max(n, 1), "sentences": n}


def accuracy_by_group(predicted: list[int], gold: list[int], groups: list[str]) -> dict[str, dict]:
    """Accuracy per group value (e.g. number of attractors) plus 'all'."""
    hits: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for p, g, key in zip(predicted, gold, groups):
        for k in (key, "all"):
            hits[k][0] += int(p == g)
            hits[k][1] += 1
    return {k: {"accuracy": c / n, "n": n} for k, (c, n) in sorted(hits.items())}


def evaluate_file(run_dir: str, path: str, checkpoint: str = "best", group_column: int = 2) -> dict:
    """Accuracy of a classification run on a TSV/two-file set, overall and per value of the
    TSV's ``group_column`` (0-based; column 2 = number of attractors in agreement data)."""
    from attnmt.data.batching import encode_corpus
    from attnmt.data.labels import read_classification
    from attnmt.data.vocab import UNK
    from attnmt.eval.windows import load_run

    model, cfg, src_tok, labels = load_run(run_dir, checkpoint)
    texts, gold_labels, extras, where = read_classification(path, cfg.data.src, cfg.data.tgt)
    if cfg.data.lowercase:
        texts = [t.lower() for t in texts]
    ids = [seq[: cfg.data.max_len] or [UNK] for seq in encode_corpus(src_tok, texts)]
    gold = [labels.encode(y, where) for y in gold_labels]
    predicted = predict(model, ids, torch.device("cpu"))
    k = group_column - 2  # extras start at column 2
    groups = [e[k] if 0 <= k < len(e) else "all" for e in extras]
    by_group = accuracy_by_group(predicted, gold, groups)
    return {"accuracy": by_group["all"]["accuracy"], "n": len(gold),
            "by_group": {g: v for g, v in by_group.items() if g != "all"}}
