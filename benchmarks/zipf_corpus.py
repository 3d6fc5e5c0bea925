"""A large synthetic text for n-gram scaling tests: Zipf-distributed words, one sentence a line.

    python benchmarks/zipf_corpus.py --tokens 100M --out zipf100M.txt [--vocab 250000]
        [--exponent 1.0] [--mean-length 22] [--seed 0]

Words are drawn independently (rank r with probability ∝ r^-exponent, written ``w<r>``), so almost
every 4- and 5-gram is distinct: for the estimator's memory this is harder than real text of the
same size (WikiText-103's 103 M tokens have fewer distinct high-order n-grams). Sentence lengths
are geometric with the given mean (at least 1). Written in blocks with numpy; prints the counts.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from attnmt.ngram.lines import gather_segments  # noqa: E402


def size(text: str) -> int:
    m = re.fullmatch(r"([0-9.]+)([KMG]?)", text.upper())
    if not m:
        raise SystemExit(f"bad size {text!r}")
    return int(float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[m.group(2)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", required=True, type=size, help="e.g. 100M")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--vocab", type=int, default=250_000)
    ap.add_argument("--exponent", type=float, default=1.0)
    ap.add_argument("--mean-length", type=float, default=22.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    cdf = np.cumsum(np.arange(1, args.vocab + 1, dtype=np.float64) ** -args.exponent)
    cdf /= cdf[-1]
    encoded = [f"w{r}".encode() for r in range(args.vocab)] + [b" ", b"\n"]
    buffer = np.frombuffer(b"".join(encoded), np.uint8)
    lengths = np.array([len(w) for w in encoded], np.int64)
    starts = np.cumsum(lengths) - lengths
    space, newline = args.vocab, args.vocab + 1
    written = lines = 0
    block = 10_000_000
    with open(args.out, "wb") as f:
        while written < args.tokens:
            n = min(block, args.tokens - written)
            ranks = np.minimum(np.searchsorted(cdf, rng.random(n)), args.vocab - 1)
            # sentence ends: geometric lengths >= 1, the block's last token ends a sentence
            ends = rng.random(n) < 1.0 / args.mean_length
            ends[-1] = True
            seps = np.where(ends, newline, space)
            ids = np.stack([ranks, seps], 1).reshape(-1)
            f.write(gather_segments(buffer, starts[ids], lengths[ids]).tobytes())
            written += n
            lines += int(ends.sum())
    print(f"{args.out}: {written} tokens, {lines} lines, vocabulary {args.vocab}")


if __name__ == "__main__":
    main()
