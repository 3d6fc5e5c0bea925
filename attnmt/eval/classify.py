"""Accuracy of a classification run (``attnmt analyse classify``), overall and per group.

    accuracy = (1/N) Σ_i [argmax_c p(c | x_i) = y_i]      per value of a TSV column (e.g. the
                                                          number of attractors in agreement data)
"""

from __future__ import annotations

from collections import defaultdict

import torch

from attnmt.data.batching import iterate_batches, make_batches
from attnmt.data.labels import encode_inputs, read_classification
from attnmt.errors import UserError
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


def evaluate_file(run_dir: str, path: str, checkpoint: str = "best", group_column: int | None = None) -> dict:
    """Accuracy of a classification run on a TSV/two-file set, overall and per value of the
    TSV's ``group_column`` (0-based; column 2 = number of attractors in agreement data).

    ``None``: column 2 where the file has one. A column given explicitly must be past the text and
    label; the group column, explicit or not, must be on every line once it is on one (a line
    without it would silently drop out of the per-group figures)."""
    if group_column is not None and group_column < 2:
        raise UserError(f"--group-column must be 2 or more (0 is the text, 1 the label), got {group_column}")
    run = load_run(run_dir, checkpoint, "cpu")
    model, cfg, src_tok, labels = run.model, run.cfg, run.src_tok, run.tgt_tok
    if cfg.task != "classify":
        raise UserError(f"not a classification run (task: {cfg.task})", str(run_dir))
    texts, gold_labels, extras, where, numbers = read_classification(path, cfg.data.src, cfg.data.tgt)
    k = (2 if group_column is None else group_column) - 2  # extras start at column 2
    having = [len(e) > k for e in extras]
    if any(having) and not all(having):
        line = numbers[having.index(False)]
        first = numbers[having.index(True)]
        raise UserError(f"has no column {k + 2} to group by, line {first} has one", where, line)
    if group_column is not None and not any(having):
        raise UserError(f"no column {group_column} to group by (0-based; the lines have "
                        f"{2 + max(len(e) for e in extras)} columns)", where)
    ids = encode_inputs(src_tok, texts, cfg.data.max_len)
    gold = [labels.encode(y, where, n) for y, n in zip(gold_labels, numbers)]
    predicted = predict(model, ids, torch.device("cpu"))
    groups = [e[k] if having[i] else "all" for i, e in enumerate(extras)]
    by_group = accuracy_by_group(predicted, gold, groups)
    return {"accuracy": by_group["all"]["accuracy"], "n": len(gold),
            "by_group": {g: v for g, v in by_group.items() if g != "all"}}
