"""Training-step overhead of the NgramRes head (Li et al. 2022) over the plain model, in one run.

    python benchmarks/ngramres_overhead.py [--text FILE] [--vocab 4000] [--model lm|seq2seq]
           [--hidden 256] [--batch 32] [--steps 20] [--threads 1]

Builds an LSTM LM (or LSTM-attention seq2seq) and a 5-gram model over the same ids — from FILE's
whitespace words (top --vocab, rest <unk>) or from a synthetic Zipfian corpus — and times full
training steps (forward, cross-entropy, backward, Adam update) of the plain model and of the
NgramRes wrapper on the same batches, interleaved so machine load hits both alike. The n-gram
query (sequence_logprobs of the batch) is also timed alone. Medians of wall time and of process
CPU time (steadier on a loaded machine). Prints one JSON line and a summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter

import numpy as np
import torch

from attnmt.config import ModelConfig
from attnmt.data.batching import collate
from attnmt.models.lm import LSTMLM
from attnmt.models.seq2seq import Seq2Seq
from attnmt.ngram.model import NgramLM
from attnmt.ngram.residual import NgramResidual
from attnmt.train.training import token_loss


def corpus(args) -> list[list[int]]:
    if args.text:
        with open(args.text, encoding="utf-8") as f:
            lines = [line.split() for line in f if line.strip()]
        counts = Counter(w for line in lines for w in line)
        ids = {w: i + 4 for i, (w, _) in enumerate(counts.most_common(args.vocab - 4))}
        return [[ids.get(w, 1) for w in line][: args.max_len] for line in lines]
    rng = np.random.default_rng(0)
    ranks = np.arange(1, args.vocab - 3)
    p = 1.0 / ranks
    p /= p.sum()
    out = []
    for _ in range(20000):
        n = int(rng.integers(10, args.max_len))
        out.append((rng.choice(len(p), n, p=p) + 4).tolist())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--text")
    ap.add_argument("--vocab", type=int, default=4000)
    ap.add_argument("--model", choices=["lm", "seq2seq"], default="lm")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=40)
    ap.add_argument("--order", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    sents = corpus(args)
    t0 = time.perf_counter()
    ngram = NgramLM.estimate(sents, args.vocab, order=args.order)
    estimate_s = time.perf_counter() - t0
    cfg = ModelConfig(layers=1, hidden=args.hidden, embed=args.hidden, dropout=0.1,
                      attention="global", score="general")

    def build():
        torch.manual_seed(0)
        if args.model == "lm":
            return LSTMLM(cfg, args.vocab, 0.1)
        return Seq2Seq(cfg, args.vocab, args.vocab, 0.1)

    plain, wrapped = build(), NgramResidual(build(), ngram, alpha=0.1)
    opts = {id(m): torch.optim.Adam(m.parameters(), lr=1e-3) for m in (plain, wrapped)}
    rng = np.random.default_rng(1)
    times: dict[str, list[float]] = {"plain": [], "ngramres": [], "ngram_query": []}
    cpu: dict[str, list[float]] = {"plain": [], "ngramres": [], "ngram_query": []}
    tokens = 0
    for step in range(args.steps + 2):
        idx = rng.choice(len(sents), args.batch, replace=False).tolist()
        tgt = [sents[i] or [1] for i in idx]
        src = tgt if args.model == "seq2seq" else [[] for _ in tgt]
        batch = collate(src, tgt, idx)
        for name, model in (("plain", plain), ("ngramres", wrapped)):
            start, start_cpu = time.perf_counter(), time.process_time()
            logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
            loss = token_loss(logits, batch.tgt_out) / batch.target_tokens
            opts[id(model)].zero_grad()
            loss.backward()
            opts[id(model)].step()
            if step >= 2:  # two warm-up steps
                times[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - start_cpu)
        start, start_cpu = time.perf_counter(), time.process_time()
        ngram.sequence_logprobs(batch.tgt_in)
        if step >= 2:
            times["ngram_query"].append(time.perf_counter() - start)
            cpu["ngram_query"].append(time.process_time() - start_cpu)
            tokens += batch.target_tokens
    med = {k: statistics.median(v) for k, v in times.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    result = {
        "benchmark": "ngramres_overhead", "model": args.model, "vocab": args.vocab,
        "hidden": args.hidden, "batch": args.batch, "order": args.order, "steps": args.steps,
        "threads": args.threads, "text": args.text or "synthetic-zipf",
        "tokens_per_step": tokens / args.steps, "ngram_estimate_s": round(estimate_s, 2),
        "plain_step_s": med["plain"], "ngramres_step_s": med["ngramres"],
        "ngram_query_s": med["ngram_query"],
        "overhead": med["ngramres"] / med["plain"] - 1.0,
        "plain_step_cpu_s": med_cpu["plain"], "ngramres_step_cpu_s": med_cpu["ngramres"],
        "ngram_query_cpu_s": med_cpu["ngram_query"],
        "overhead_cpu": med_cpu["ngramres"] / med_cpu["plain"] - 1.0,
    }
    print(json.dumps(result))
    print(f"NgramRes step {med['ngramres'] * 1000:.1f} ms vs plain {med['plain'] * 1000:.1f} ms "
          f"(+{100 * result['overhead']:.1f} %; CPU time +{100 * result['overhead_cpu']:.1f} %); "
          f"n-gram query alone {med['ngram_query'] * 1000:.1f} ms")


if __name__ == "__main__":
    main()
