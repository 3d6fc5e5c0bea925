"""BLEU by source sentence length (Luong et al. 2015, Figure 6).

Test sentences are grouped by the number of whitespace words of their source, in the paper's
buckets <10, 10-20, 20-30, 30-40, 40-50, 50+ (a sentence of exactly 10 words is in 10-20), and
each system's corpus BLEU (sacrebleu, 13a tokenisation) is computed per bucket.
"""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

import sacrebleu

from attnmt.errors import UserError

EDGES = (10, 20, 30, 40, 50)


def bucket_labels(edges: tuple[int, ...] = EDGES) -> list[str]:
    labels = [f"<{edges[0]}"]
    labels += [f"{a}-{b}" for a, b in itertools.pairwise(edges)]
    return labels + [f"{edges[-1]}+"]


def bucket_of(n_words: int, edges: tuple[int, ...] = EDGES) -> int:
    """Index of the bucket of a sentence with ``n_words`` source words."""
    for k, edge in enumerate(edges):
        if n_words < edge:
            return k
    return len(edges)


def bleu_by_length(
    src: list[str], ref: list[str], hyps: dict[str, list[str]], edges: tuple[int, ...] = EDGES
) -> list[dict]:
    """One row per bucket: {"bucket", "sentences", "avg_len", <system>: BLEU}; a bucket without
    sentences has None in place of numbers (no BLEU, not BLEU 0)."""
    for name, lines in hyps.items():
        if len(lines) != len(src):
            raise UserError(f"{name} has {len(lines)} lines, the source has {len(src)}")
    if len(ref) != len(src):
        raise UserError(f"the references have {len(ref)} lines, the source has {len(src)}")
    if not any(line.strip() for line in src):
        raise UserError("no source sentences: nothing to score by length")
    members: list[list[int]] = [[] for _ in range(len(edges) + 1)]
    for i, line in enumerate(src):
        members[bucket_of(len(line.split()), edges)].append(i)
    rows = []
    for label, idx in zip(bucket_labels(edges), members):
        row = {"bucket": label, "sentences": len(idx),
               "avg_len": round(sum(len(src[i].split()) for i in idx) / len(idx), 1) if idx else None}
        for name, lines in hyps.items():
            if idx:
                score = sacrebleu.corpus_bleu([lines[i] for i in idx], [[ref[i] for i in idx]]).score
                row[name] = round(score, 2)
            else:
                row[name] = None
        rows.append(row)
    return rows


def write_table(rows: list[dict], csv_path: str | Path, md_path: str | Path | None = None) -> None:
    """The rows as CSV and, optionally, as a markdown table; an empty bucket's numbers are blank
    in the CSV and "–" in the table."""
    from attnmt.data.corpus import atomic_output, write_lines

    keys = list(rows[0])
    with atomic_output(csv_path, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows([{k: "" if r[k] is None else r[k] for k in keys} for r in rows])
    if md_path is not None:
        lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
        for r in rows:
            lines.append("| " + " | ".join("–" if r[k] is None else str(r[k]) for k in keys) + " |")
        write_lines(md_path, lines)
