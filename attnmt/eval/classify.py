"""Accuracy of a classification run (``attnmt analyse classify``), overall and per group.

    accuracy = (1/N) Σ_i [argmax_c p(c | x_i) = y_i]      per value of a TSV column (e.g. the
                                                          number of attractors in agreement data)
"""

from __future__ import annotations

from collections import defaultdict

import torch

from attnmt.data.batching import iterate_batches, make_batches
from attnmt.data.labels import encode_inputs, read_classification
from attnmt.runs.loader import load_run


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
    run = load_run(run_dir, checkpoint, "cpu")
    model, cfg, src_tok, labels = run.model, run.cfg, run.src_tok, run.tgt_tok
    texts, gold_labels, extras, where = read_classification(path, cfg.data.src, cfg.data.tgt)
    if cfg.data.lowercase:
        texts = [t.lower() for t in texts]
    ids = encode_inputs(src_tok, texts, cfg.data.max_len)
    gold = [labels.encode(y, where) for y in gold_labels]
    predicted = predict(model, ids, torch.device("cpu"))
    k = group_column - 2  # extras start at column 2
    groups = [e[k] if 0 <= k < len(e) else "all" for e in extras]
    by_group = accuracy_by_group(predicted, gold, groups)
    return {"accuracy": by_group["all"]["accuracy"], "n": len(gold),
            "by_group": {g: v for g, v in by_group.items() if g != "all"}}
