"""Memory to load an n-gram model for queries, against its size on disk.

    python benchmarks/ngram_load.py --model M.ngram|M.arpa [--contexts 100]

Loads the model (ARPA or attnmt binary), builds the query index and computes full-vocabulary
distributions for --contexts random 4-token contexts; prints one JSON line with the file size,
the process's peak RSS (before loading: the interpreter and torch; after: the total), the ratio
peak / file size, and the load and query times (CPU seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

import torch

from attnmt.ngram import load_ngram


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--contexts", type=int, default=100)
    args = ap.parse_args()
    torch.set_num_threads(1)
    before = peak_mib()
    start = time.process_time()
    lm = load_ngram(args.model)
    loaded = time.process_time()
    g = torch.Generator().manual_seed(0)
    ctx = torch.randint(4, lm.vocab_size, (args.contexts, max(lm.order - 1, 1)), generator=g)
    dist = lm.next_token_logprobs(ctx)
    queried = time.process_time()
    size = os.path.getsize(args.model) / 2**20
    peak = peak_mib()
    print(json.dumps({
        "model": args.model, "file_mib": round(size, 1), "ngrams": lm.info.get("counts")
        or [len(t.word) for t in lm.tables], "peak_rss_before_mib": round(before, 1),
        "peak_rss_mib": round(peak, 1), "peak_over_file": round(peak / size, 3),
        "added_over_file": round((peak - before) / size, 3),
        "load_cpu_s": round(loaded - start, 2), "query_cpu_s": round(queried - loaded, 3),
        "finite": bool(torch.isfinite(dist).all()),
    }))


if __name__ == "__main__":
    main()
